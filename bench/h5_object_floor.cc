// The HDF5 floor of a distributed save of many small pieces (docs/PERF.md, "Reshard"): libhdf5
// alone creating the objects docs/FORMAT.md sections 4 and 10 require of each piece -- a chunked
// dataset with the shuffle + zstd pipeline and its one chunk (H5Dwrite_chunk of bytes prepared
// beforehand: no compression, fingerprint or checksum is computed), its checksum table and
// chunk-info table with their hash attributes, its three attributes -- and each file's index,
// then closing, fsync-ing and renaming the file, as the writer does. No seedstore code runs: what
// this takes is what one process spends in HDF5 whatever seedstore does around it.
//
// Usage: h5_object_floor [FILES (256)] [PIECES_PER_FILE (148)] [PIECE_BYTES (3400)] [DIR (/tmp)]
//                        [LAYOUT: v1 (default) | packed]
// `packed` is the same pieces as docs/FORMAT.md's version 2 draft lays them out: one dataset per
// (dtype, chunk shape) of shape [cells, chunk...], chunked one cell per chunk, every piece's
// chunk one cell (H5Dwrite_chunk at [cell, 0]), one checksum and one chunk-info table per packed
// dataset, and the pieces' records in the index only.
// Prints the wall time, the time per piece, and `cp` + `sync` of the bytes written for scale.
#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A pass-through stand-in for filter 32015 (zstd), so that the pipeline message is the real
// one; chunks are written raw with H5Dwrite_chunk and never pass through it.
size_t PassThrough(unsigned, size_t, const unsigned[], size_t nbytes, size_t*, void**) {
  return nbytes;
}

void StringAttr(hid_t obj, const char* name, const std::string& v) {
  const hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, v.size() + 1);
  H5Tset_cset(t, H5T_CSET_UTF8);
  const hid_t s = H5Screate(H5S_SCALAR);
  const hid_t a = H5Acreate2(obj, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, t, v.c_str());
  H5Aclose(a);
  H5Sclose(s);
  H5Tclose(t);
}

void U64Attr(hid_t obj, const char* name, const std::vector<uint64_t>& v) {
  const hsize_t n = v.size();
  const hid_t s = v.size() == 1 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr);
  const hid_t a = H5Acreate2(obj, name, H5T_STD_U64LE, s, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_UINT64, v.data());
  H5Aclose(a);
  H5Sclose(s);
}

hid_t Table(hid_t group, const std::string& name, int rank, const hsize_t* dims,
            const std::vector<uint64_t>& v, hid_t untimed) {
  const hid_t s = H5Screate_simple(rank, dims, nullptr);
  const hid_t d =
      H5Dcreate2(group, name.c_str(), H5T_STD_U64LE, s, H5P_DEFAULT, untimed, H5P_DEFAULT);
  H5Dwrite(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
  U64Attr(d, "seedstore.xxh3", {v.size()});
  H5Sclose(s);
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  const int files = argc > 1 ? std::atoi(argv[1]) : 256;
  const int pieces = argc > 2 ? std::atoi(argv[2]) : 148;
  const size_t bytes = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 3400;
  const std::string dir =
      std::string(argc > 4 ? argv[4] : "/tmp") + "/h5floor." + std::to_string(getpid());
  const std::string layout = argc > 5 ? argv[5] : "v1";
  if (files < 1 || pieces < 1 || bytes < 4 || (layout != "v1" && layout != "packed") ||
      std::system(("mkdir -p " + dir).c_str()) != 0) {
    std::fprintf(stderr,
                 "usage: h5_object_floor [FILES] [PIECES_PER_FILE] [PIECE_BYTES >= 4] [DIR] "
                 "[v1|packed]\n");
    return 2;
  }
  const H5Z_class2_t cls = {H5Z_CLASS_T_VERS, 32015,   1,       1,
                            "zstd stand-in",  nullptr, nullptr, PassThrough};
  if (H5Zfilter_avail(32015) <= 0) H5Zregister(&cls);
  std::vector<unsigned char> chunk(bytes, 0x5a);
  const std::string index(pieces * 250, ' ');  // ~250 bytes of index JSON per piece (FORMAT.md 4.1)
  const double t0 = Now();
  for (int f = 0; f < files; ++f) {
    const std::string path = dir + "/rank" + std::to_string(f) + ".h5", temp = path + ".tmp";
    const hid_t fapl = H5Pcreate(H5P_FILE_ACCESS), fcpl = H5Pcreate(H5P_FILE_CREATE),
                untimed = H5Pcreate(H5P_DATASET_CREATE), gcpl = H5Pcreate(H5P_GROUP_CREATE);
    H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_LATEST);
    H5Pset_sieve_buf_size(fapl, 0);
    H5Pset_obj_track_times(fcpl, false);
    H5Pset_obj_track_times(untimed, false);
    H5Pset_obj_track_times(gcpl, false);
    const hid_t h5 = H5Fcreate(temp.c_str(), H5F_ACC_TRUNC, fcpl, fapl);
    StringAttr(h5, "seedstore.format", "seedstore");
    U64Attr(h5, "seedstore.version", {1});
    hid_t groups[4];
    const char* names[4] = {"tensors", "checksums", "chunkinfo", "seedstore"};
    for (int g = 0; g < 4; ++g)
      groups[g] = H5Gcreate2(h5, names[g], H5P_DEFAULT, gcpl, H5P_DEFAULT);
    if (layout == "packed") {
      // Every piece one cell of /tensors/float32.<n>: [pieces, n], chunked [1, n].
      const std::string name = "float32." + std::to_string(bytes / 4);
      const hsize_t dims[2] = {static_cast<hsize_t>(pieces), bytes / 4}, cell[2] = {1, bytes / 4};
      const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
      H5Pset_obj_track_times(dcpl, false);
      H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
      H5Pset_chunk(dcpl, 2, cell);
      H5Pset_shuffle(dcpl);
      const unsigned level = 1;
      H5Pset_filter(dcpl, 32015, H5Z_FLAG_MANDATORY, 1, &level);
      const hid_t space = H5Screate_simple(2, dims, nullptr);
      const hid_t d = H5Dcreate2(groups[0], name.c_str(), H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl,
                                 H5P_DEFAULT);
      for (int p = 0; p < pieces; ++p) {
        const hsize_t off[2] = {static_cast<hsize_t>(p), 0};
        H5Dwrite_chunk(d, H5P_DEFAULT, 0, off, bytes, chunk.data());
      }
      const hsize_t rows = pieces, info[2] = {static_cast<hsize_t>(pieces), 3};
      H5Dclose(Table(groups[1], name, 1, &rows, std::vector<uint64_t>(pieces, 42), untimed));
      H5Dclose(Table(groups[2], name, 2, info, std::vector<uint64_t>(3 * pieces, 42), untimed));
      StringAttr(d, "seedstore.dtype", "float32");
      H5Dclose(d);
      H5Sclose(space);
      H5Pclose(dcpl);
    }
    for (int p = 0; layout == "v1" && p < pieces; ++p) {
      const std::string name = "h." + std::to_string(p) + ".mlp.c_fc.weight";
      const hsize_t n = bytes / 4, off = 0, one = 1, info[2] = {1, 3};
      const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
      H5Pset_obj_track_times(dcpl, false);
      H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
      H5Pset_chunk(dcpl, 1, &n);
      H5Pset_shuffle(dcpl);
      const unsigned level = 1;
      H5Pset_filter(dcpl, 32015, H5Z_FLAG_MANDATORY, 1, &level);
      const hid_t space = H5Screate_simple(1, &n, nullptr);
      const hid_t d = H5Dcreate2(groups[0], name.c_str(), H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl,
                                 H5P_DEFAULT);
      H5Dwrite_chunk(d, H5P_DEFAULT, 0, &off, bytes, chunk.data());
      H5Dclose(Table(groups[1], name, 1, &one, {42}, untimed));
      H5Dclose(Table(groups[2], name, 2, info, {42, 1, 2}, untimed));
      StringAttr(d, "seedstore.name", name);
      StringAttr(d, "seedstore.dtype", "float32");
      U64Attr(d, "seedstore.fingerprint", {1, 2});
      H5Dclose(d);
      H5Sclose(space);
      H5Pclose(dcpl);
    }
    const hsize_t len = index.size();
    const hid_t s = H5Screate_simple(1, &len, nullptr);
    const hid_t ix =
        H5Dcreate2(groups[3], "index", H5T_STD_U8LE, s, H5P_DEFAULT, untimed, H5P_DEFAULT);
    H5Dwrite(ix, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, index.data());
    U64Attr(ix, "seedstore.xxh3", {7});
    H5Dclose(ix);
    H5Sclose(s);
    for (hid_t g : groups) H5Gclose(g);
    H5Fclose(h5);
    for (hid_t p : {fapl, fcpl, untimed, gcpl}) H5Pclose(p);
    const int fd = open(temp.c_str(), O_RDONLY);
    if (fd < 0 || fsync(fd) != 0 || rename(temp.c_str(), path.c_str()) != 0) {
      std::perror(temp.c_str());
      return 1;
    }
    close(fd);
  }
  const int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) fsync(dfd), close(dfd);
  const double t1 = Now();
  const std::string cp = "cp -r " + dir + " " + dir + ".cp && sync " + dir + ".cp/*";
  const double t2 = Now();
  const int rc = std::system(cp.c_str());
  const double t3 = Now();
  std::printf(
      "%s: %d files x %d pieces of %zu bytes: HDF5 objects written in %.3f s (%.1f us per "
      "piece); cp + sync of the same files %.3f s%s\n",
      layout.c_str(), files, pieces, bytes, t1 - t0,
      1e6 * (t1 - t0) / (static_cast<double>(files) * pieces), t3 - t2,
      rc == 0 ? "" : " (cp failed)");
  if (std::system(("rm -rf " + dir + " " + dir + ".cp").c_str()) != 0) return 1;
  return 0;
}
