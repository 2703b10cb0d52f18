#include "io/reshard.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <random>

#include "io/atomic_file.h"
#include "io/chunk_copy.h"
#include "io/commit_protocol.h"
#include "io/master_seal.h"
#include "io/master_vds.h"
#include "io/parallel.h"
#include "io/path.h"
#include "io/rank_file_writer.h"
#include "io/rank_files.h"
#include "io/reshard_proof.h"
#include "io/save_buffers.h"
#include "io/save_plan.h"
#include "io/store_writer.h"
#include "io/writer_lock.h"

namespace seedstore {

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void RootSeedOf(const Catalog& c, uint64_t* seed, Generator* generator) {
  *seed = 0;
  *generator = Generator::kThreefry;
  if (auto* s = dynamic_cast<const SpecCatalog*>(&c)) {
    *seed = s->spec().seed;
    *generator = s->spec().generator;
  } else if (auto* h = dynamic_cast<const H5Store*>(&c)) {
    *seed = h->root_seed();
    *generator = h->generator();
  } else if (auto* d = dynamic_cast<const DistCatalog*>(&c)) {
    *seed = d->root_seed();
    *generator = d->generator();
  } else if (auto* b = dynamic_cast<const BufferCatalog*>(&c)) {
    *seed = b->root_seed();
    *generator = b->generator();
  }
}

bool ReshardReport::ok() const {
  for (const auto& r : rows)
    if (!r.ok()) return false;
  return true;
}

std::string ReshardReport::Table() const {
  std::string s;
  char line[512];
  std::snprintf(line, sizeof line, "%-40s %-5s %6s %12s %-8s %-32s %s\n", "tensor", "kind",
                "pieces", "bytes", "source", "fingerprint (source)", "proof");
  s += line;
  size_t bad = 0;
  for (const auto& r : rows) {
    std::snprintf(line, sizeof line, "%s %-5s %6zu %12llu %-8s %-32s %s\n", PadRight(r.name, 40).c_str(),
                  r.lazy ? "lazy" : "dense", r.pieces, static_cast<unsigned long long>(r.bytes),
                  r.source_ref.c_str(), FingerprintHex(r.source).c_str(),
                  r.ok() ? "ok" : ("MISMATCH (output " + FingerprintHex(r.output) + ")").c_str());
    s += line;
    bad += !r.ok();
  }
  std::snprintf(line, sizeof line,
                "%zu tensors: %zu proven equal to the source, %zu mismatch(es); %llu bytes "
                "written in %.3f s (chunks: %llu copied as stored, %llu encoded), proof %.3f s "
                "(%s)\n",
                rows.size(), rows.size() - bad, bad, static_cast<unsigned long long>(bytes),
                write_s, static_cast<unsigned long long>(chunks_copied),
                static_cast<unsigned long long>(chunks_encoded), prove_s,
                full_proof ? "every chunk decoded" : "stored chunks vs chunk-info");
  s += line;
  return s;
}

Status ReshardReport::ToStatus() const {
  std::string names;
  size_t n = 0;
  for (const auto& r : rows)
    if (!r.ok() && n++ < 3) names += (names.empty() ? "'" : ", '") + r.name + "'";
  if (n == 0) return Status::Ok();
  return Mismatch("reshard: " + std::to_string(n) + " tensor(s) of '" + path +
                  "' differ from the source: " + names);
}

Result<ReshardReport> Reshard(Exchange& comm, const Catalog& src, const Layout& layout,
                              const std::string& requested, const DistSaveOptions& options) {
  // Through a symbolic link: the save (master, rank files, lock) goes where it points.
  auto resolved = ResolveSymlinks(requested);
  SEEDSTORE_RETURN_IF_ERROR(Agree(comm, resolved.status(), "save: path"));
  const std::string& path = *resolved;
  // A save that replaces a file keeps its permissions: its new rank files get them too (the
  // master keeps them as any replaced file does).
  DistSaveOptions o = options;
  if (struct stat old; o.write.file_mode < 0 && ::stat(path.c_str(), &old) == 0 && S_ISREG(old.st_mode))
    o.write.file_mode = static_cast<int>(old.st_mode & 07777);
  const double t0 = Now();
  const int me = comm.rank(), np = comm.size();
  const int world = o.consolidate ? 1 : layout.world_size();
  const auto& ts = src.tensors();
  const size_t n = ts.size();
  ReshardReport rep;
  rep.path = path;
  rep.world = world;
  rep.writers = np;
  rep.consolidated = o.consolidate;
  rep.full_proof = o.full_proof;
  for (const TensorRecord& t : ts) SEEDSTORE_RETURN_IF_ERROR(CheckWholeTensor(src, t, "reshard"));
  // The names next to the master -- its lock, the commit protocol's files and, unless
  // consolidated, its rank files -- must fit NAME_MAX: found out at the last rename, all the
  // work would be lost.
  const std::string longest =
      o.consolidate ? ProtocolName(path, 0xffffffffu, "commit") : RankFileName(path, 0xffffffffu, world - 1);
  if (BaseName(longest).size() > NAME_MAX)
    return InvalidArgument("save: '" + requested + "': the name is too long for its " +
                           (o.consolidate ? "commit files (as '" : "rank files (as '") + BaseName(longest) +
                           "', " + std::to_string(BaseName(longest).size()) + " bytes; a file name has at most " +
                           std::to_string(NAME_MAX) + "): give a shorter name");
  uint64_t seed;
  Generator gen;
  RootSeedOf(src, &seed, &gen);

  WriterLock lock;
  SEEDSTORE_RETURN_IF_ERROR(Agree(comm, me == 0 ? lock.Acquire(path) : Status::Ok(), "lock"));
  TestFaultPoint(me, "lock");

  Plan plan;
  if (!o.consolidate) {
    auto p = MakePlan(src, layout);
    Status ps = p.status();
    if (ps.ok() && !(o.max_padding >= 0))
      ps = InvalidArgument("reshard: max padding must be >= 0, not " + std::to_string(o.max_padding));
    if (ps.ok()) ps = PadPieces(src, o.write, o.max_padding, &*p);
    SEEDSTORE_RETURN_IF_ERROR(Agree(comm, ps, "plan"));
    plan = std::move(*p);
  } else {
    plan.shards.resize(n);
    plan.stored.resize(n);
  }
  NumberPieces(&plan);
  TestFaultPoint(me, "plan");
  // Save id: rank 0 draws it, the sum spreads it.
  uint64_t id64 = 0;
  if (me == 0) id64 = std::random_device{}() ^ static_cast<uint32_t>(::getpid() * 2654435761u);
  SEEDSTORE_RETURN_IF_ERROR(comm.AllReduceSum(&id64, 1, "save id"));
  const uint32_t id = static_cast<uint32_t>(id64);

  // Source fingerprints: recorded, or computed piece by piece by the owning process.
  std::vector<uint64_t> sfp(2 * n, 0);
  Status st;
  for (size_t i = 0; i < n && st.ok(); ++i) {
    if (ts[i].fingerprint) {
      if (me == 0) {
        sfp[2 * i] = ts[i].fingerprint->lane0;
        sfp[2 * i + 1] = ts[i].fingerprint->lane1;
      }
      continue;
    }
    std::vector<Region> mine;
    if (ts[i].lazy || o.consolidate) {
      if (me == static_cast<int>(i % np)) mine.push_back(WholeTensor(ts[i].shape));
    } else {
      for (const Shard& s : plan.shards[i])
        if (WriterOf(s.replicas[0], np, world) == me) mine.push_back(s.region);
    }
    for (const Region& r : mine) {
      auto f = src.FingerprintRegion(i, r, o.cpu);
      if (!f.ok()) {
        st = f.status();
        break;
      }
      sfp[2 * i] += f->lane0;
      sfp[2 * i + 1] += f->lane1;
    }
  }
  SEEDSTORE_RETURN_IF_ERROR(Agree(comm, st, "source fingerprints"));
  SEEDSTORE_RETURN_IF_ERROR(comm.AllReduceSum(sfp.data(), sfp.size(), "source fingerprints"));
  TestFaultPoint(me, "source-fingerprints");
  std::vector<Fingerprint> src_fp(n);
  for (size_t i = 0; i < n; ++i) src_fp[i] = Fingerprint{sfp[2 * i], sfp[2 * i + 1]};

  // Write. Until the commit point (CommitStaged) the save already at `path` is untouched;
  // the files of this save are removed on failure only while they can never be committed
  // (docs/FORMAT.md 10, "Commit protocol").
  uint64_t bytes = 0;
  std::vector<uint64_t> counts(kCounts * n, 0);  // per tensor: chunks copied, encoded; bytes stored
  std::vector<uint64_t> piece_fps;               // per piece: lane0, lane1 (distributed saves)
  const std::string staged = ProtocolName(path, id, "new"), gate = ProtocolName(path, id, "commit");
  const std::vector<int> mine = o.consolidate ? std::vector<int>{} : RanksWrittenBy(me, np, layout.world_size());
  // Rank 0 knows when its commit happens: until then a signal removes its files (after that
  // they may be the save's). The others do not, so theirs stay on a signal, as on SIGKILL, for
  // the next save to remove.
  signal_cleanup::Scope registered;
  if (me == 0) {
    for (int r : mine) registered.Add(RankFileName(path, id, r));
    registered.Add(staged);
    registered.Add(gate);
  }
  bool committed = false;  // rank 0: it renamed the gate over `path`; the others: they learned so
  auto drop_mine = [&] {
    for (int r : mine) ::unlink(RankFileName(path, id, r).c_str());
    if (me == 0) {
      ::unlink(gate.c_str());
      ::unlink(staged.c_str());
    }
  };
  // Every failure after the save id is drawn ends here. A rank other than 0 that does not know
  // the outcome vetoes the commit first (VetoCommit), which makes the outcome final and tells
  // it; it removes its new files only when the save was not committed.
  auto give_up = [&](const Status& why) -> Result<ReshardReport> {
    if (me != 0 && !committed) committed = VetoCommit(path, id);
    if (!committed) {
      drop_mine();
      return why;
    }
    std::fprintf(stderr,
                 "seedstore: %s\nseedstore: rank %d: the save was committed before that: '%s' "
                 "holds the new save, proven before its commit\n",
                 why.message().c_str(), me, path.c_str());
    rep.committed = true;
    return rep;
  };
  if (o.consolidate) {
    if (me == 0) {
      st = [&]() -> Status {
        SEEDSTORE_ASSIGN_OR_RETURN(auto w, StoreWriter::Create(staged, seed, gen, o.write));
        // Dense tensors go through AddPiece for every kind of source: chunks are copied as
        // stored only after their checksums verify, so a corrupt source fails here.
        for (size_t i = 0; i < n; ++i) {
          if (ts[i].lazy) {
            SEEDSTORE_RETURN_IF_ERROR(w->AddLazy(ts[i].lazy->spec, &src_fp[i], true, o.cpu));
          } else {
            ChunkMatcher matcher(src, i, o.write);
            const Region whole = WholeTensor(ts[i].shape);
            SEEDSTORE_ASSIGN_OR_RETURN(DenseChunking chunking, matcher.For(whole));
            SEEDSTORE_RETURN_IF_ERROR(AddPiece(*w, src, i, whole, std::move(chunking),
                                               /*as_piece=*/false, nullptr, &counts[kCounts * i]));
            bytes += ts[i].NumBytes();
          }
        }
        return w->Commit();
      }();
    }
  } else {
    // This process's rank files (a contiguous block of ranks, so that its pieces of a flat
    // tensor are neighbours), in groups written at once (WriteRankFiles), several groups at a
    // time: their chunk reads, hashing and fsyncs overlap (HDF5 calls themselves take turns
    // under the store's lock).
    const int threads = ThreadCount(o.cpu.threads, mine.size());
    const size_t groups = std::min(mine.size(), std::max<size_t>(threads, (mine.size() + kMaxOpenRankFiles - 1) /
                                                                              kMaxOpenRankFiles));
    std::vector<uint64_t> file_bytes(groups, 0);
    std::vector<std::vector<uint64_t>> file_counts(groups, std::vector<uint64_t>(kCounts * n, 0));
    // Each piece's recorded fingerprint, from the process that wrote it (zero elsewhere; the
    // groups write disjoint pieces), all-reduced for the master's index.
    piece_fps.assign(2 * plan.first_piece.back(), 0);
    st = ParallelFor(groups, threads, false, [&](uint64_t k, int) -> Status {
      std::vector<int> ranks(mine.begin() + k * mine.size() / groups, mine.begin() + (k + 1) * mine.size() / groups);
      std::vector<std::string> files;
      for (int r : ranks) files.push_back(RankFileName(path, id, r));
      return WriteRankFiles(src, plan, ranks, files, o, &file_bytes[k], file_counts[k], piece_fps);
    });
    for (size_t k = 0; k < groups; ++k) {
      bytes += file_bytes[k];
      for (size_t c = 0; c < counts.size(); ++c) counts[c] += file_counts[k][c];
    }
    SimulateFault(o.simulate, o.simulate_rank, me, "write rank files");
    TestFaultPoint(me, "rank-files");
    Status a = Agree(comm, st, "write rank files");
    // The index records each tensor's chunks and bytes over all its pieces (inspect shows
    // them without opening a rank file).
    if (a.ok()) a = comm.AllReduceSum(counts.data(), counts.size(), "chunk counts");
    if (a.ok()) a = comm.AllReduceSum(piece_fps.data(), piece_fps.size(), "piece fingerprints");
    if (!a.ok()) return give_up(a);
    if (me == 0) {
      st = [&]() -> Status {
        // One temporary, one rename: the index and virtual datasets are added to the
        // writer's closed temporary, and it is sealed, before it is made durable and renamed
        // to the staged name.
        WriteOptions mo = o.write;
        mo.user_block = kSealBytes;
        SEEDSTORE_ASSIGN_OR_RETURN(auto w, StoreWriter::Create(staged, seed, gen, mo));
        for (size_t i = 0; i < n; ++i)
          if (ts[i].lazy)
            SEEDSTORE_RETURN_IF_ERROR(w->AddLazy(ts[i].lazy->spec, &src_fp[i], true, o.cpu));
        return w->Commit([&](const std::string& temp) {
          SEEDSTORE_RETURN_IF_ERROR(
              AddDistributedObjects(temp, src, plan, layout, id, path, src_fp, counts, piece_fps));
          return SealMaster(temp);
        });
      }();
    }
  }
  // Staged: complete, sealed (a master) and durable. The gate is its second name.
  if (me == 0) {
    if (st.ok() && ::link(staged.c_str(), gate.c_str()) != 0)
      st = IoError("save: cannot link '" + staged + "' as '" + gate + "': " + std::strerror(errno));
  }
  TestFaultPoint(me, "master");
  if (Status a = Agree(comm, st, "write master"); !a.ok()) return give_up(a);
  if (o.consolidate)
    if (Status a = comm.AllReduceSum(counts.data(), counts.size(), "chunk counts"); !a.ok()) return give_up(a);
  if (Status a = comm.AllReduceSum(&bytes, 1, "bytes"); !a.ok()) return give_up(a);
  rep.bytes = bytes;
  const double t1 = Now();
  rep.write_s = t1 - t0;

  // Prove: read back what was written, fingerprint each distinct piece once (its writer does),
  // sum over processes.
  std::vector<uint64_t> ofp(2 * n, 0);
  std::unique_ptr<Catalog> out;
  if (o.consolidate) {
    auto s = H5Store::Open(staged);
    st = s.status();
    if (s.ok()) out = std::move(*s);
  } else {
    auto s = DistCatalog::Open(staged);
    st = s.status();
    if (s.ok()) out = std::move(*s);
  }
  if (st.ok() && out->tensors().size() != n) st = Corrupt("reshard: output has another tensor count");
  // Per dense tensor of a distributed save: whether every piece stores whole cells of one
  // chunk grid (then the stored-chunks proof goes by cells: DistCatalog::ProveCells). Each
  // process looks at the pieces it wrote (PieceGrid; the index lists them in plan order):
  // first the writer of piece 0 tells its chunk shape, then every process counts its pieces
  // that store another grid or none.
  const size_t gw = 1 + kMaxRank;
  std::vector<uint64_t> ref(n * gw, 0), off(n, 0);
  std::vector<std::vector<std::vector<uint64_t>>> mine_grid(n);
  const auto* dout = dynamic_cast<const DistCatalog*>(out.get());
  const bool try_cells = dout && !o.full_proof;
  for (size_t i = 0; i < n && st.ok() && try_cells; ++i) {
    mine_grid[i].resize(plan.shards[i].size());
    for (size_t k = 0; k < plan.shards[i].size() && st.ok(); ++k) {
      if (WriterOf(plan.shards[i][k].replicas[0], np, world) != me) continue;
      auto c = dout->PieceGrid(i, k);
      st = c.status();
      if (!c.ok()) break;
      mine_grid[i][k] = *c;
      if (k == 0) {
        ref[i * gw] = c->empty();
        for (size_t e = 0; e < c->size(); ++e) ref[i * gw + 1 + e] = (*c)[e];
      }
    }
  }
  if (Status e = Agree(comm, st, "prove: chunk grids"); !e.ok()) return give_up(e);
  if (Status e = comm.AllReduceSum(ref.data(), ref.size(), "prove: chunk grids"); !e.ok()) return give_up(e);
  for (size_t i = 0; i < n; ++i) {
    if (!try_cells || plan.shards[i].empty() || ref[i * gw] != 0) {
      off[i] = 1;
      continue;
    }
    const std::vector<uint64_t> c0(ref.begin() + i * gw + 1, ref.begin() + i * gw + 1 + ts[i].shape.size());
    for (size_t k = 0; k < plan.shards[i].size(); ++k)
      if (WriterOf(plan.shards[i][k].replicas[0], np, world) == me && mine_grid[i][k] != c0) ++off[i];
  }
  if (Status e = comm.AllReduceSum(off.data(), off.size(), "prove: chunk grids"); !e.ok()) return give_up(e);
  for (size_t i = 0; i < n && st.ok(); ++i) {
    const TensorRecord& t = out->tensors()[i];
    if (t.name != ts[i].name || t.shape != ts[i].shape || t.dtype != ts[i].dtype) {
      st = Corrupt("reshard: output tensor " + std::to_string(i) + " is '" + t.name +
                   "', not the source's '" + ts[i].name + "' with its shape and dtype");
      break;
    }
    std::vector<Region> mine;
    if (t.lazy) {
      // No data moved: the record's fingerprint stands for it, checked against the spec
      // (same spec, same resolved key).
      if (me == 0) {
        const bool same = ts[i].lazy && t.lazy->key == ts[i].lazy->key &&
                          TensorSpecToJson(t.lazy->spec) == TensorSpecToJson(ts[i].lazy->spec);
        Fingerprint f = t.fingerprint.value_or(Fingerprint{});
        if (!same) f.lane0 ^= 1;  // forces a mismatch
        ofp[2 * i] = f.lane0;
        ofp[2 * i + 1] = f.lane1;
      }
      continue;
    }
    if (o.consolidate) {
      if (me == static_cast<int>(i % np)) mine.push_back(WholeTensor(t.shape));
    } else {
      for (const Shard& s : plan.shards[i])
        if (WriterOf(s.replicas[0], np, world) == me) mine.push_back(s.region);
    }
    for (const Region& r : mine) {
      auto f = ProvePiece(*out, i, r, o.cpu, o.full_proof, off[i] == 0);
      if (!f.ok()) {
        st = f.status();
        break;
      }
      ofp[2 * i] += f->lane0;
      ofp[2 * i + 1] += f->lane1;
    }
  }
  if (Status e = Agree(comm, st, "prove"); !e.ok()) return give_up(e);
  if (Status e = comm.AllReduceSum(ofp.data(), ofp.size(), "prove"); !e.ok()) return give_up(e);
  for (size_t i = 0; i < n; ++i) {
    ReshardRow row;
    row.name = ts[i].name;
    row.lazy = ts[i].lazy.has_value();
    if (!row.lazy) {
      row.pieces = o.consolidate ? 1 : plan.shards[i].size();
      row.bytes = ts[i].NumBytes();
    }
    row.source_ref = ts[i].fingerprint ? "recorded" : "computed";
    row.chunks_copied = counts[kCounts * i];
    row.chunks_encoded = counts[kCounts * i + 1];
    rep.chunks_copied += row.chunks_copied;
    rep.chunks_encoded += row.chunks_encoded;
    row.source = src_fp[i];
    row.output = Fingerprint{ofp[2 * i], ofp[2 * i + 1]};
    rep.rows.push_back(std::move(row));
  }
  TestFaultPoint(me, "prove");
  rep.prove_s = Now() - t1;
  // The commit point: only a proven save is committed, so that exit 0 means proven and any
  // failure before it leaves `path` as it was.
  const bool proven = rep.ok();
  TestFaultPoint(me, "before-rename");
  if (me == 0 && proven) {
    st = CommitStaged(path, id, &registered, &committed);
    // Durable: the replaced save's files, and what interrupted saves left, go.
    if (committed) RemoveOtherPieces(path, id);
  }
  if (me != 0) TestFaultPoint(me, "after-rename");
  uint64_t outcome = committed ? 1 : 0;
  if (Status a = comm.AllReduceSum(&outcome, 1, "commit"); !a.ok()) return give_up(a);
  if (outcome == 0) {  // not proven, or rank 0 could not commit: nobody will
    drop_mine();
    if (!st.ok()) return st;
    if (!proven) return rep;  // the rows name the tensors that differ (ToStatus)
    return IoError("save: '" + path + "' not replaced: rank 0 could not commit the save (see its message)");
  }
  committed = true;
  rep.committed = true;
  TestFaultPoint(me, "done");
  if (Status a = comm.Barrier("reshard done"); !a.ok()) return give_up(a);
  // Every rank knows the outcome, so none will look at the staged name again.
  if (me == 0) ::unlink(staged.c_str());
  rep.total_s = Now() - t0;
  return rep;
}

}  // namespace seedstore
