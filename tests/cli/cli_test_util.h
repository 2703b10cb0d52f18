// Helpers of the cli tier (the shipped binary run as a user would): run `seedstore <args>`
// capturing stdout, stderr and the exit code; temp files; shared specs and layouts.
#pragma once
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include "io/safetensors.h"
#include "store/spec.h"
#include "tests/store_test_util.h"

namespace seedstore::clitest {

struct Proc {
  int code = -1;
  std::string out, err;
};

inline std::string Bin() {
  const char* b = std::getenv("SEEDSTORE_BIN");
  return b ? b : "seedstore";
}

// This process's folder, removed when it exits (SEEDSTORE_KEEP_TMP=1 keeps it).
inline std::string TempDir() {
  static const testutil::TempDir dir("seedstore-cli");
  return dir.path();
}

// Runs `seedstore <args>`, capturing stdout and stderr.
inline Proc Exec(const std::string& args) {
  const std::string err_path = TempDir() + "/stderr.txt";
  const std::string cmd = Bin() + " " + args + " 2>" + err_path;
  Proc r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream e(err_path);
  r.err.assign(std::istreambuf_iterator<char>(e), {});
  return r;
}

inline std::string Write(const std::string& name, const std::string& text) {
  const std::string path = TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

inline const char* kSpec = R"({"seedstore": 1, "seed": 7, "tensors": [
  {"name": "act", "shape": [8, 6, 10], "dtype": "bfloat16", "init": {"dist": "normal", "scale": 0.05}, "key": {"seed": 43}},
  {"name": "norm", "shape": [10], "dtype": "float32", "init": {"dist": "ones"}},
  {"name": "flat.w", "shape": [7, 13], "dtype": "float32", "init": {"dist": "uniform"}, "generator": "philox"},
  {"name": "layers.0.w", "shape": [9, 5], "dtype": "float16", "init": {"dist": "truncated_normal"}}]})";
inline const char* kLayout =
    R"J({"mesh": {"axes": ["data", "pipeline", "tensor"], "shape": [2, 2, 2]},
  "placements": [{"match": "act", "spec": [["data", "pipeline"], null, "tensor"]},
                 {"match": "layers.*.w", "dtensor": ["Shard(0)", "Replicate()", "Shard(1)"]},
                 {"match": "flat.*", "flat": ["data", "pipeline"]}]})J";

// `diff --json`'s rows by tensor name (copied out of the parsed document).
inline std::map<std::string, nlohmann::json> DiffRows(const std::string& json_out) {
  const auto j = nlohmann::json::parse(json_out);
  std::map<std::string, nlohmann::json> rows;
  for (const auto& t : j["tensors"]) rows[t["name"]] = t;
  return rows;
}

// Three tensors flat over 8 ranks: rank 5 holds no element of f (4 elements) nor of z (none).
inline const char* kEmptyShardsSpec = R"({"seedstore": 1, "seed": 3, "tensors": [
    {"name": "f", "shape": [4], "dtype": "float32", "init": {"dist": "normal"}},
    {"name": "z", "shape": [0, 5], "dtype": "bfloat16", "init": {"dist": "normal"}},
    {"name": "w", "shape": [16, 2], "dtype": "float32", "init": {"dist": "uniform"}}]})";
inline const char* kFlatOver8 =
    R"({"mesh": {"axes": ["data"], "shape": [8]}, "placements": [{"match": "*", "flat": ["data"]}]})";

// Runs bash `script` in a private user and mount namespace (`unshare -rm`: it may mount a
// tmpfs), its stdout and stderr into *out; returns pclose's status.
inline int RunUnshared(const std::string& script, std::string* out) {
  FILE* p = popen(("unshare -rm bash " + script + " 2>&1").c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out->append(buf, n);
  return pclose(p);
}

// Every entry of folder `d`: name -> bytes (a folder's: "").
inline std::map<std::string, std::string> Folder(const std::string& d) {
  std::map<std::string, std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(d))
    files[e.path().filename()] = e.is_regular_file() ? ReadFile(e.path()) : "";
  return files;
}

// A spec of 4 float32 tensors t0..t3 of 16 KiB each (uniform, root seed `seed`).
inline std::string FourTensorSpec(const std::string& name, int seed) {
  nlohmann::json tensors = nlohmann::json::array();
  for (int k = 0; k < 4; ++k) {
    std::string t = std::to_string(k);
    t.insert(t.begin(), 't');
    tensors.push_back(
        {{"name", t}, {"shape", {64, 64}}, {"dtype", "float32"}, {"init", {{"dist", "uniform"}}}});
  }
  return Write(name, nlohmann::json{{"seedstore", 1}, {"seed", seed}, {"tensors", tensors}}.dump());
}

// Runs a shell command line, returning its stdout and stderr together.
inline std::string Shell(const std::string& cmd) {
  std::string out;
  FILE* p = popen(("(" + cmd + ") 2>&1").c_str(), "r");
  if (!p) return out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  pclose(p);
  return out;
}

// A safetensors file holding one tensor 't' of `shape` ("[0, 5]") and no bytes.
inline std::string EmptyTensorFile(const std::string& name, const std::string& shape) {
  std::string header =
      R"({"t": {"dtype": "F32", "shape": )" + shape + R"(, "data_offsets": [0, 0]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string bytes(8, '\0');
  for (int k = 0; k < 8; ++k) bytes[k] = static_cast<char>((header.size() >> (8 * k)) & 0xFF);
  return Write(name, bytes + header);
}

}  // namespace seedstore::clitest
