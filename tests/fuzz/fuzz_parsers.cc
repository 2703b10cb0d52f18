// libFuzzer harness for the parsers that read untrusted text: spec files, layout files, box
// arguments, fingerprints, dtype/distribution names, regions (pieces), safetensors indexes and
// headers (seedstore.shards metadata included). Bad input must give an error Status, never a crash,
// leak or UB (ASan + UBSan). The target is chosen by $SEEDSTORE_FUZZ_TARGET: spec, layout, box,
// misc, sink (ParseJson against nlohmann's own parse, and its element sink against a plain
// parse), index (Hugging Face safetensors index), safetensors. Build and run (bounded):
// tests/fuzz/run_fuzz.sh [seconds-per-target]
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "store/json_text.h"
#include "store/layout.h"
#include "store/spec.h"

using namespace seedstore;

namespace {
std::string Target() {
  const char* t = std::getenv("SEEDSTORE_FUZZ_TARGET");
  return t ? t : "spec";
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string target = Target();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (target == "spec") {
    auto m = ModelSpec::Parse(text, "fuzz");
    if (m.ok()) {
      // Round trip: what we accept we must write back and re-read identically.
      auto again = ModelSpec::FromJson(m->ToJson(), "again");
      if (!again.ok() || again->ToJson() != m->ToJson()) std::abort();
      for (const auto& t : m->tensors) {
        auto p = PrepareSampler(t, TensorKey(m->seed, t));
        (void)p;
        (void)FingerprintSeed(t.name, t.dtype, t.shape);
      }
    }
  } else if (target == "layout") {
    auto l = Layout::Parse(text, "fuzz");
    if (l.ok()) {
      auto again = Layout::FromJson(l->ToJson());
      if (!again.ok()) std::abort();
      const std::vector<uint64_t> shapes[] = {{}, {7}, {10, 3}, {4, 5, 6}, {0, 9}};
      for (const auto& s : shapes) {
        for (int r = 0; r < std::min(l->world_size(), 64); ++r) {
          auto sh = l->ShardOf("w.weight", s, r);
          (void)sh;
        }
      }
    }
  } else if (target == "box") {
    const std::vector<uint64_t> shapes[] = {{}, {5}, {3, 4}, {2, 3, 4}, {1ull << 40, 3}};
    for (const auto& s : shapes) {
      auto b = ParseBox(text, s);
      if (b.ok() && !b->flat)
        for (int d = 0; d < b->rank; ++d)
          if (b->start[d] > b->stop[d] || b->stop[d] > s[d]) std::abort();
    }
  } else if (target == "misc") {
    (void)ParseFingerprintHex(text);
    (void)ParseDType(text);
    (void)ParseDist(text);
    auto j = nlohmann::json::parse(text, nullptr, false);
    if (!j.is_discarded()) {
      (void)InitSpec::FromJson(j, "fuzz");
      (void)TensorSpecFromJson(j, Generator::kThreefry, "fuzz");
      // A region (distributed-save pieces, piece records): what it accepts lies in the shape.
      const std::vector<uint64_t> shapes[] = {{}, {5}, {3, 4}, {1ull << 40, 1ull << 30}};
      for (const auto& s : shapes) {
        auto r = RegionFromJson(j, s);
        if (!r.ok()) continue;
        if (r->rank != static_cast<int>(s.size())) std::abort();
        unsigned __int128 n = 1;
        for (uint64_t d : s) n *= d;
        if (r->flat && (r->begin > r->end || r->end > n)) std::abort();
        for (int d = 0; !r->flat && d < r->rank; ++d)
          if (r->start[d] > r->stop[d] || r->stop[d] > s[d]) std::abort();
        (void)LocalShape(*r);
      }
    }
  } else if (target == "sink") {
    // ParseJson with an element sink (how a distributed save's index is read) accepts exactly
    // what a plain parse accepts, and takes exactly the elements the plain parse holds at the
    // sink's path, in order, leaving that array empty and the rest as it was.
    std::string err;
    const nlohmann::json plain = ParseJson(text, &err);
    // ParseJson builds nlohmann's own document: a text both accept is the same document; one
    // only nlohmann accepts is one ParseJson refuses by design (a repeated key, a NUL byte,
    // nesting past kMaxJsonDepth).
    const nlohmann::json ref = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
    if (!plain.is_discarded() && (ref.is_discarded() || ref != plain)) std::abort();
    if (plain.is_discarded() && !ref.is_discarded() &&
        err.find("duplicate key") == std::string::npos && err.find("NUL") == std::string::npos &&
        err.find("nested deeper") == std::string::npos)
      std::abort();
    for (const std::vector<std::string>& path : {std::vector<std::string>{}, {"t"}}) {
      std::vector<nlohmann::json> taken;
      size_t next = 0;
      bool in_order = true;
      const JsonElementSink sink{path, [&](size_t k, nlohmann::json&& e) {
                                   in_order = in_order && k == next++;
                                   taken.push_back(std::move(e));
                                 }};
      std::string err2;
      nlohmann::json sunk = ParseJson(text, &err2, &sink);
      if (plain.is_discarded() != sunk.is_discarded()) std::abort();
      if (plain.is_discarded()) continue;
      if (!in_order) std::abort();
      nlohmann::json* at = path.empty()                             ? &sunk
                           : sunk.is_object() && sunk.contains("t") ? &sunk["t"]
                                                                    : nullptr;
      if (!at || !at->is_array()) {  // no such array: nothing taken, nothing changed
        if (!taken.empty() || sunk != plain) std::abort();
        continue;
      }
      if (!at->empty()) std::abort();
      for (auto& e : taken) at->push_back(std::move(e));
      if (sunk != plain) std::abort();
    }
  } else if (target == "index") {
    // A Hugging Face model.safetensors.index.json: what it accepts names files in its folder,
    // sorted and each once, and maps every tensor to one of them.
    auto idx = ParseSafetensorsIndex(text, "/models/m/model.safetensors.index.json");
    if (idx.ok()) {
      for (size_t k = 0; k < idx->files.size(); ++k) {
        const std::string& f = idx->files[k];
        if (f.rfind("/models/m/", 0) != 0 || f.find('/', 10) != std::string::npos) std::abort();
        if (k > 0 && !(idx->files[k - 1] < f)) std::abort();
        if (!idx->tensors.count(f)) std::abort();
      }
      if (idx->tensors.size() != idx->files.size()) std::abort();
    }
  } else if (target == "safetensors") {
    // The header parser works on files: write the input to a private temp file.
    static const std::string path =
        "/tmp/seedstore-fuzz-" + std::to_string(getpid()) + ".safetensors";
    FILE* f = std::fopen(path.c_str(), "wb");
    std::fwrite(data, 1, size, f);
    std::fclose(f);
    auto s = SafetensorsFile::Open(path);
    if (s.ok()) {
      for (const auto& e : s->entries()) {
        // What the parser promises the catalogs built on it: a shape a region can hold, whose
        // byte count is the entry's (no wrapped element count).
        if (e.shape.size() > static_cast<size_t>(kMaxRank)) std::abort();
        if (WholeTensor(e.shape).Count() * DTypeSize(e.dtype) != e.end - e.begin) std::abort();
        if (e.end - e.begin <= (1u << 16)) {
          std::string buf(e.end - e.begin, '\0');
          (void)s->Read(e, buf.data());
        }
      }
      auto it = s->metadata().find("seedstore.shards");
      if (it != s->metadata().end()) (void)nlohmann::json::parse(it->second, nullptr, false);
    }
  }
  return 0;
}
