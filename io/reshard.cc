#include "io/reshard.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
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
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

void RootSeedOf(const Catalog& c, uint64_t* seed, Generator* generator) {
  *seed = c.root_seed();
  *generator = c.generator();
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
    std::snprintf(line, sizeof line, "%s %-5s %6zu %12llu %-8s %-32s %s\n",
                  PadRight(r.name, 40).c_str(), r.lazy ? "lazy" : "dense", r.pieces,
                  static_cast<unsigned long long>(r.bytes), r.source_ref.c_str(),
                  FingerprintHex(r.source).c_str(),
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

namespace {

// Adds fingerprint(r) of each region to lanes[0] and lanes[1]; the first error stops it.
Status AddUp(const std::vector<Region>& regions,
             const std::function<Result<Fingerprint>(const Region&)>& fingerprint,
             uint64_t* lanes) {
  for (const Region& r : regions) {
    SEEDSTORE_ASSIGN_OR_RETURN(const Fingerprint f, fingerprint(r));
    lanes[0] += f.lane0;
    lanes[1] += f.lane1;
  }
  return Status::Ok();
}

// One save in progress on this process (Reshard), as the steps of the protocol that its
// methods are, in the order Run calls them (docs/FORMAT.md 10). Members are declared in the
// order the steps make them: the lock is released last, after the signal registrations and the
// opened output.
class SaveJob {
 public:
  SaveJob(Exchange& comm, const Catalog& src, const Layout& layout, const std::string& requested,
          const std::string& path, const DistSaveOptions& o)
      : comm_(comm),
        src_(src),
        layout_(layout),
        requested_(requested),
        path_(path),
        o_(o),
        me_(comm.rank()),
        np_(comm.size()),
        world_(o.consolidate ? 1 : layout.world_size()),
        ts_(src.tensors()),
        n_(ts_.size()) {}

  Result<ReshardReport> Run();

 private:
  // Refuses a source whose records are pieces and a path whose rank or commit files would
  // have names too long for the file system.
  Status CheckSourceAndNames();
  // The plan (distinct pieces, padded to the source's chunk grid), agreed by every process.
  Status MakeAgreedPlan();
  // The save id: rank 0 draws it, the sum spreads it.
  Status DrawSaveId();
  // src_fp_: recorded, or computed piece by piece by the owning process.
  Status SourceFingerprints();
  // Rank 0 writes the consolidated store, staged (st_).
  void WriteConsolidated();
  // Every process writes its rank files; then rank 0 the master, sealed and staged (st_).
  // An error here (other than the master's) has been agreed and ends the save (GiveUp).
  Status WriteDistributed();
  // The staged file's second name, the gate; the job agrees the write, and sums the counts.
  Status StageAndAgree();
  // Opens the staged output (out_) and, for a distributed save, decides per tensor whether its
  // pieces store whole cells of one chunk grid (off_[i] == 0: prove by cells).
  Status OpenOutputAndGrids();
  // Reads back and proves every piece this process wrote; the sums into the report's rows.
  Status Prove();
  // Commits a proven save (rank 0), tells every process the outcome.
  Result<ReshardReport> Commit();
  // Every failure after the save id is drawn ends here. A rank other than 0 that does not know
  // the outcome vetoes the commit first (VetoCommit), which makes the outcome final and tells
  // it; it removes its new files only when the save was not committed.
  Result<ReshardReport> GiveUp(const Status& why);
  // Removes this process's new files (its rank files; rank 0: the staged file and its gate).
  void DropMine();
  // The regions of tensor i this process fingerprints and proves: the pieces it wrote, or, with
  // `whole` (a lazy tensor, a consolidated save), the whole tensor on process i mod np.
  std::vector<Region> MyRegions(size_t i, bool whole) const;
  // The pieces this process wrote, rank file by rank file (ascending), each file's in tensor
  // order: what reads them back goes file by file, so that each rank file is opened once
  // whatever the cap on open files (DistCatalog::RankStore's least recently used).
  struct MyPiece {
    int rank;
    size_t i, k;  // tensor, and its piece (plan_.pieces[i][k])
  };
  std::vector<MyPiece> MyPiecesByFile() const;

  Exchange& comm_;
  const Catalog& src_;
  const Layout& layout_;
  const std::string& requested_;
  const std::string path_;
  const DistSaveOptions o_;
  const int me_, np_, world_;
  const std::vector<TensorRecord>& ts_;
  const size_t n_;
  ReshardReport rep_;
  double t0_ = 0, t1_ = 0;
  uint64_t seed_ = 0;
  Generator gen_ = Generator::kThreefry;
  WriterLock lock_;
  Plan plan_;
  uint32_t id_ = 0;
  std::vector<Fingerprint> src_fp_;
  Status st_;
  uint64_t bytes_ = 0;
  std::vector<uint64_t> counts_;  // per tensor: chunks copied, encoded; bytes stored
  PieceReports reports_;          // per piece: fingerprint and cells (distributed saves)
  std::string staged_, gate_;
  std::vector<int> mine_;  // the layout ranks whose files this process writes
  // Rank 0 knows when its commit happens: until then a signal removes its files (after that
  // they may be the save's). The others do not, so theirs stay on a signal, as on SIGKILL, for
  // the next save to remove.
  signal_cleanup::Scope registered_;
  bool committed_ = false;  // rank 0: it renamed the gate over `path`; the others: they learned so
  std::unique_ptr<Catalog> out_;
  DistCatalog* dout_ = nullptr;  // out_ when it is a distributed save
  std::vector<uint64_t> off_;    // per tensor: pieces not on the common grid (0: by cells)
};

Status SaveJob::CheckSourceAndNames() {
  for (const TensorRecord& t : ts_) SEEDSTORE_RETURN_IF_ERROR(CheckWholeTensor(src_, t, "reshard"));
  // The names next to the master -- its lock, the commit protocol's files and, unless
  // consolidated, its rank files -- must fit NAME_MAX: found out at the last rename, all the
  // work would be lost.
  const std::string longest = o_.consolidate ? ProtocolName(path_, 0xffffffffu, "commit")
                                             : RankFileName(path_, 0xffffffffu, world_ - 1);
  if (BaseName(longest).size() > NAME_MAX)
    return InvalidArgument("save: '" + requested_ + "': the name is too long for its " +
                           (o_.consolidate ? "commit files (as '" : "rank files (as '") +
                           BaseName(longest) + "', " + std::to_string(BaseName(longest).size()) +
                           " bytes; a file name has at most " + std::to_string(NAME_MAX) +
                           "): give a shorter name");
  return Status::Ok();
}

Status SaveJob::MakeAgreedPlan() {
  if (!o_.consolidate) {
    auto p = MakePlan(src_, layout_);
    Status ps = p.status();
    if (ps.ok() && !(o_.max_padding >= 0))
      ps = InvalidArgument("reshard: max padding must be >= 0, not " +
                           std::to_string(o_.max_padding));
    if (ps.ok() && o_.rank_file_version != kStoreFormatVersion &&
        o_.rank_file_version != kCellsFormatVersion)
      ps = InvalidArgument("reshard: rank file version " + std::to_string(o_.rank_file_version) +
                           " (versions " + std::to_string(kStoreFormatVersion) + " and " +
                           std::to_string(kCellsFormatVersion) + " are written)");
    if (ps.ok()) ps = PadPieces(src_, o_.write, o_.max_padding, &*p);
    SEEDSTORE_RETURN_IF_ERROR(Agree(comm_, ps, "plan"));
    plan_ = std::move(*p);
  } else {
    plan_.pieces.resize(n_);
  }
  NumberPieces(&plan_);
  return Status::Ok();
}

Status SaveJob::DrawSaveId() {
  uint64_t id64 = 0;
  if (me_ == 0) id64 = std::random_device{}() ^ static_cast<uint32_t>(::getpid() * 2654435761u);
  SEEDSTORE_RETURN_IF_ERROR(comm_.AllReduceSum(&id64, 1, "save id"));
  id_ = static_cast<uint32_t>(id64);
  return Status::Ok();
}

std::vector<Region> SaveJob::MyRegions(size_t i, bool whole) const {
  std::vector<Region> mine;
  if (whole) {
    if (me_ == static_cast<int>(i % np_)) mine.push_back(WholeTensor(ts_[i].shape));
  } else {
    for (const DistCatalog::Piece& p : plan_.pieces[i])
      if (WriterOf(p.rank, np_, world_) == me_) mine.push_back(p.region());
  }
  return mine;
}

Status SaveJob::SourceFingerprints() {
  std::vector<uint64_t> sfp(2 * n_, 0);
  Status st;
  for (size_t i = 0; i < n_ && st.ok(); ++i) {
    if (ts_[i].fingerprint) {
      if (me_ == 0) {
        sfp[2 * i] = ts_[i].fingerprint->lane0;
        sfp[2 * i + 1] = ts_[i].fingerprint->lane1;
      }
      continue;
    }
    st = AddUp(
        MyRegions(i, ts_[i].lazy || o_.consolidate),
        [&](const Region& r) { return src_.FingerprintRegion(i, r, o_.cpu); }, &sfp[2 * i]);
  }
  SEEDSTORE_RETURN_IF_ERROR(Agree(comm_, st, "source fingerprints"));
  SEEDSTORE_RETURN_IF_ERROR(comm_.AllReduceSum(sfp.data(), sfp.size(), "source fingerprints"));
  TestFaultPoint(me_, "source-fingerprints");
  src_fp_.resize(n_);
  for (size_t i = 0; i < n_; ++i) src_fp_[i] = Fingerprint{sfp[2 * i], sfp[2 * i + 1]};
  return Status::Ok();
}

std::vector<SaveJob::MyPiece> SaveJob::MyPiecesByFile() const {
  std::vector<MyPiece> v;
  for (size_t i = 0; i < n_; ++i)
    for (size_t k = 0; k < plan_.pieces[i].size(); ++k) {
      const int r = plan_.pieces[i][k].rank;
      if (WriterOf(r, np_, world_) == me_) v.push_back({r, i, k});
    }
  std::stable_sort(v.begin(), v.end(),
                   [](const MyPiece& a, const MyPiece& b) { return a.rank < b.rank; });
  return v;
}

void SaveJob::DropMine() {
  for (int r : mine_) ::unlink(RankFileName(path_, id_, r).c_str());
  if (me_ == 0) {
    ::unlink(gate_.c_str());
    ::unlink(staged_.c_str());
  }
}

Result<ReshardReport> SaveJob::GiveUp(const Status& why) {
  if (me_ != 0 && !committed_) committed_ = VetoCommit(path_, id_);
  if (!committed_) {
    DropMine();
    return why;
  }
  std::fprintf(stderr,
               "seedstore: %s\nseedstore: rank %d: the save was committed before that: '%s' "
               "holds the new save, proven before its commit\n",
               why.message().c_str(), me_, path_.c_str());
  rep_.committed = true;
  return rep_;
}

void SaveJob::WriteConsolidated() {
  if (me_ != 0) return;
  st_ = [&]() -> Status {
    SEEDSTORE_ASSIGN_OR_RETURN(auto w, StoreWriter::Create(staged_, seed_, gen_, o_.write));
    // Dense tensors go through AddPiece for every kind of source: chunks are copied as
    // stored only after their checksums verify, so a corrupt source fails here.
    for (size_t i = 0; i < n_; ++i) {
      if (ts_[i].lazy) {
        SEEDSTORE_RETURN_IF_ERROR(w->AddLazy(ts_[i].lazy->spec, &src_fp_[i], true, o_.cpu));
      } else {
        ChunkMatcher matcher(src_, i, o_.write);
        const Region whole = WholeTensor(ts_[i].shape);
        SEEDSTORE_ASSIGN_OR_RETURN(DenseChunking chunking, matcher.For(whole));
        SEEDSTORE_RETURN_IF_ERROR(AddPiece(*w, src_, i, whole, std::move(chunking),
                                           /*as_piece=*/false, nullptr, &counts_[kCounts * i]));
        bytes_ += ts_[i].NumBytes();
      }
    }
    return w->Commit();
  }();
}

Status SaveJob::WriteDistributed() {
  // This process's rank files (a contiguous block of ranks, so that its pieces of a flat
  // tensor are neighbours), in groups written at once (WriteRankFiles), several groups at a
  // time: their chunk reads, hashing and fsyncs overlap (HDF5 calls themselves take turns
  // under the store's lock).
  const int threads = ThreadCount(o_.cpu.threads, mine_.size());
  const size_t most = MaxOpenRankFiles(threads);
  const size_t groups =
      std::min(mine_.size(), std::max<size_t>(threads, (mine_.size() + most - 1) / most));
  std::vector<uint64_t> file_bytes(groups, 0);
  std::vector<std::vector<uint64_t>> file_counts(groups, std::vector<uint64_t>(kCounts * n_, 0));
  // Each piece's recorded fingerprint, from the process that wrote it (zero elsewhere; the
  // groups write disjoint pieces), all-reduced for the master's index.
  reports_ = PieceReports::For(plan_);
  st_ = ParallelFor(groups, threads, false, [&](uint64_t k, int) -> Status {
    std::vector<int> ranks(mine_.begin() + k * mine_.size() / groups,
                           mine_.begin() + (k + 1) * mine_.size() / groups);
    std::vector<std::string> files;
    for (int r : ranks) files.push_back(RankFileName(path_, id_, r));
    return WriteRankFiles(src_, plan_, ranks, files, o_, &file_bytes[k], file_counts[k], reports_);
  });
  for (size_t k = 0; k < groups; ++k) {
    bytes_ += file_bytes[k];
    for (size_t c = 0; c < counts_.size(); ++c) counts_[c] += file_counts[k][c];
  }
  SimulateFault(o_.simulate, o_.simulate_rank, me_, "write rank files");
  TestFaultPoint(me_, "rank-files");
  Status a = Agree(comm_, st_, "write rank files");
  // The index records each tensor's chunks and bytes over all its pieces (inspect shows
  // them without opening a rank file).
  if (a.ok()) a = comm_.AllReduceSum(counts_.data(), counts_.size(), "chunk counts");
  if (a.ok()) a = comm_.AllReduceSum(reports_.words.data(), reports_.words.size(), "piece reports");
  SEEDSTORE_RETURN_IF_ERROR(a);
  if (me_ == 0) {
    st_ = [&]() -> Status {
      // One temporary, one rename: the index and virtual datasets are added to the
      // writer's closed temporary, and it is sealed, before it is made durable and renamed
      // to the staged name.
      WriteOptions mo = o_.write;
      mo.user_block = kSealBytes;
      mo.cells = false;  // the master is a version 1 store (docs/FORMAT.md 10)
      SEEDSTORE_ASSIGN_OR_RETURN(auto w, StoreWriter::Create(staged_, seed_, gen_, mo));
      for (size_t i = 0; i < n_; ++i)
        if (ts_[i].lazy)
          SEEDSTORE_RETURN_IF_ERROR(w->AddLazy(ts_[i].lazy->spec, &src_fp_[i], true, o_.cpu));
      return w->Commit([&](const std::string& temp) {
        SEEDSTORE_RETURN_IF_ERROR(AddDistributedObjects(temp, src_, plan_, layout_, id_, path_,
                                                        src_fp_, counts_, reports_,
                                                        o_.rank_file_version));
        return SealMaster(temp);
      });
    }();
  }
  return Status::Ok();
}

Status SaveJob::StageAndAgree() {
  // Staged: complete, sealed (a master) and durable. The gate is its second name.
  if (me_ == 0) {
    if (st_.ok() && ::link(staged_.c_str(), gate_.c_str()) != 0)
      st_ = IoError("save: cannot link '" + staged_ + "' as '" + gate_ +
                    "': " + std::strerror(errno));
  }
  TestFaultPoint(me_, "master");
  SEEDSTORE_RETURN_IF_ERROR(Agree(comm_, st_, "write master"));
  if (o_.consolidate)
    SEEDSTORE_RETURN_IF_ERROR(comm_.AllReduceSum(counts_.data(), counts_.size(), "chunk counts"));
  SEEDSTORE_RETURN_IF_ERROR(comm_.AllReduceSum(&bytes_, 1, "bytes"));
  return Status::Ok();
}

Status SaveJob::OpenOutputAndGrids() {
  if (o_.consolidate) {
    auto s = H5Store::Open(staged_);
    st_ = s.status();
    if (s.ok()) out_ = std::move(*s);
  } else {
    auto s = DistCatalog::Open(staged_);
    st_ = s.status();
    if (s.ok()) {
      dout_ = s->get();
      out_ = std::move(*s);
    }
  }
  if (st_.ok() && out_->tensors().size() != n_)
    st_ = Corrupt("reshard: output has another tensor count");
  // Per dense tensor of a distributed save: whether every piece stores whole cells of one
  // chunk grid (then the stored-chunks proof goes by cells: DistCatalog::ProveCells). Each
  // process looks at the pieces it wrote (PieceGrid; the index lists them in plan order):
  // first the writer of piece 0 tells its chunk shape, then every process counts its pieces
  // that store another grid or none.
  const size_t gw = 1 + kMaxRank;
  std::vector<uint64_t> ref(n_ * gw, 0);
  off_.assign(n_, 0);
  std::vector<std::vector<std::vector<uint64_t>>> mine_grid(n_);
  const bool try_cells = dout_ && !o_.full_proof;
  for (size_t i = 0; i < n_ && try_cells; ++i) mine_grid[i].resize(plan_.pieces[i].size());
  if (try_cells && st_.ok()) {
    for (const MyPiece& m : MyPiecesByFile()) {
      auto c = dout_->PieceGrid(m.i, m.k);
      st_ = c.status();
      if (!c.ok()) break;
      mine_grid[m.i][m.k] = *c;
      if (m.k == 0) {
        ref[m.i * gw] = c->empty();
        for (size_t e = 0; e < c->size(); ++e) ref[m.i * gw + 1 + e] = (*c)[e];
      }
    }
  }
  SEEDSTORE_RETURN_IF_ERROR(Agree(comm_, st_, "prove: chunk grids"));
  SEEDSTORE_RETURN_IF_ERROR(comm_.AllReduceSum(ref.data(), ref.size(), "prove: chunk grids"));
  for (size_t i = 0; i < n_; ++i) {
    if (!try_cells || plan_.pieces[i].empty() || ref[i * gw] != 0) {
      off_[i] = 1;
      continue;
    }
    const std::vector<uint64_t> c0(ref.begin() + i * gw + 1,
                                   ref.begin() + i * gw + 1 + ts_[i].shape.size());
    for (size_t k = 0; k < plan_.pieces[i].size(); ++k)
      if (WriterOf(plan_.pieces[i][k].rank, np_, world_) == me_ && mine_grid[i][k] != c0) ++off_[i];
  }
  return comm_.AllReduceSum(off_.data(), off_.size(), "prove: chunk grids");
}

Status SaveJob::Prove() {
  std::vector<uint64_t> ofp(2 * n_, 0);
  for (size_t i = 0; i < n_ && st_.ok(); ++i) {
    const TensorRecord& t = out_->tensors()[i];
    if (t.name != ts_[i].name || t.shape != ts_[i].shape || t.dtype != ts_[i].dtype) {
      st_ = Corrupt("reshard: output tensor " + std::to_string(i) + " is '" + t.name +
                    "', not the source's '" + ts_[i].name + "' with its shape and dtype");
      break;
    }
    if (t.lazy && me_ == 0) {
      // No data moved: the record's fingerprint stands for it, checked against the spec
      // (same spec, same resolved key).
      const bool same = ts_[i].lazy && t.lazy->key == ts_[i].lazy->key &&
                        TensorSpecToJson(t.lazy->spec) == TensorSpecToJson(ts_[i].lazy->spec);
      Fingerprint f = t.fingerprint.value_or(Fingerprint{});
      if (!same) f.lane0 ^= 1;  // forces a mismatch
      ofp[2 * i] = f.lane0;
      ofp[2 * i + 1] = f.lane1;
    }
  }
  if (st_.ok() && o_.consolidate) {
    for (size_t i = 0; i < n_ && st_.ok(); ++i)
      if (!out_->tensors()[i].lazy)
        st_ = AddUp(
            MyRegions(i, true),
            [&](const Region& r) {
              return ProvePiece(*out_, i, r, o_.cpu, o_.full_proof, off_[i] == 0, SIZE_MAX);
            },
            &ofp[2 * i]);
  } else if (st_.ok()) {
    // Rank file by rank file, each by one thread and closed when done with. Two threads
    // overlap: opening a file parses and checks its index, and proving reads and hashes its
    // chunks, outside the HDF5 lock. With fewer files than threads, each file's pieces are
    // hashed on its share of the threads.
    const std::vector<MyPiece> mine = MyPiecesByFile();
    std::vector<size_t> starts;  // where each file's pieces start in `mine`
    for (size_t j = 0; j < mine.size(); ++j)
      if (j == 0 || mine[j].rank != mine[j - 1].rank) starts.push_back(j);
    dout_->set_rank_files_read_once(true);
    const int all = ThreadCount(o_.cpu.threads, UINT64_MAX);
    const int threads = ThreadCount(o_.cpu.threads, starts.size());
    CpuOptions each = o_.cpu;
    if (threads > 1) each.threads = std::max(1, all / threads);  // the rest, inside each file
    std::vector<std::vector<uint64_t>> part(threads, std::vector<uint64_t>(2 * n_, 0));
    st_ = ParallelFor(starts.size(), threads, false, [&](uint64_t f, int t) -> Status {
      const size_t end = f + 1 < starts.size() ? starts[f + 1] : mine.size();
      Status e;
      for (size_t j = starts[f]; j < end && e.ok(); ++j) {
        const MyPiece& m = mine[j];
        if (out_->tensors()[m.i].lazy) continue;
        auto fp = ProvePiece(*out_, m.i, plan_.pieces[m.i][m.k].region(), each, o_.full_proof,
                             off_[m.i] == 0, m.k);
        if (!fp.ok()) {
          e = fp.status();
        } else {
          part[t][2 * m.i] += fp->lane0;
          part[t][2 * m.i + 1] += fp->lane1;
        }
      }
      dout_->CloseRankFile(mine[starts[f]].rank);
      return e;
    });
    for (const auto& q : part)
      for (size_t c = 0; c < ofp.size(); ++c) ofp[c] += q[c];
  }
  SEEDSTORE_RETURN_IF_ERROR(Agree(comm_, st_, "prove"));
  SEEDSTORE_RETURN_IF_ERROR(comm_.AllReduceSum(ofp.data(), ofp.size(), "prove"));
  for (size_t i = 0; i < n_; ++i) {
    ReshardRow row;
    row.name = ts_[i].name;
    row.lazy = ts_[i].lazy != nullptr;
    if (!row.lazy) {
      row.pieces = o_.consolidate ? 1 : plan_.pieces[i].size();
      row.bytes = ts_[i].NumBytes();
    }
    row.source_ref = ts_[i].fingerprint ? "recorded" : "computed";
    row.chunks_copied = counts_[kCounts * i];
    row.chunks_encoded = counts_[kCounts * i + 1];
    rep_.chunks_copied += row.chunks_copied;
    rep_.chunks_encoded += row.chunks_encoded;
    row.source = src_fp_[i];
    row.output = Fingerprint{ofp[2 * i], ofp[2 * i + 1]};
    rep_.rows.push_back(std::move(row));
  }
  return Status::Ok();
}

Result<ReshardReport> SaveJob::Commit() {
  // The commit point: only a proven save is committed, so that exit 0 means proven and any
  // failure before it leaves `path` as it was.
  const bool proven = rep_.ok();
  TestFaultPoint(me_, "before-rename");
  if (me_ == 0 && proven) {
    Status durable;
    st_ = CommitStaged(path_, id_, &registered_, &committed_, &durable);
    if (committed_ && durable.ok()) {
      // Durable: the replaced save's files, and what interrupted saves left, go.
      RemoveOtherPieces(path_, id_);
    } else if (committed_) {
      // Committed, but a crash could still bring the replaced master back: its files stay,
      // for the next save whose commit is durable to remove.
      std::fprintf(stderr,
                   "seedstore: warning: %s: the save '%s' is committed but not known to be "
                   "durable; the files of the save it replaced are kept (the next save to '%s' "
                   "removes them)\n",
                   durable.message().c_str(), path_.c_str(), path_.c_str());
    }
  }
  if (me_ != 0) TestFaultPoint(me_, "after-rename");
  uint64_t outcome = committed_ ? 1 : 0;
  if (Status a = comm_.AllReduceSum(&outcome, 1, "commit"); !a.ok()) return GiveUp(a);
  if (outcome == 0) {  // not proven, or rank 0 could not commit: nobody will
    DropMine();
    if (!st_.ok()) return st_;
    if (!proven) return rep_;  // the rows name the tensors that differ (ToStatus)
    return IoError("save: '" + path_ +
                   "' not replaced: rank 0 could not commit the save (see its message)");
  }
  committed_ = true;
  rep_.committed = true;
  TestFaultPoint(me_, "done");
  if (Status a = comm_.Barrier("reshard done"); !a.ok()) return GiveUp(a);
  // Every rank knows the outcome, so none will look at the staged name again.
  if (me_ == 0) ::unlink(staged_.c_str());
  rep_.total_s = Now() - t0_;
  return rep_;
}

Result<ReshardReport> SaveJob::Run() {
  t0_ = Now();
  rep_.path = path_;
  rep_.world = world_;
  rep_.writers = np_;
  rep_.consolidated = o_.consolidate;
  rep_.full_proof = o_.full_proof;
  SEEDSTORE_RETURN_IF_ERROR(CheckSourceAndNames());
  RootSeedOf(src_, &seed_, &gen_);
  SEEDSTORE_RETURN_IF_ERROR(Agree(comm_, me_ == 0 ? lock_.Acquire(path_) : Status::Ok(), "lock"));
  TestFaultPoint(me_, "lock");
  SEEDSTORE_RETURN_IF_ERROR(MakeAgreedPlan());
  TestFaultPoint(me_, "plan");
  SEEDSTORE_RETURN_IF_ERROR(DrawSaveId());
  SEEDSTORE_RETURN_IF_ERROR(SourceFingerprints());

  // Write. Until the commit point (CommitStaged) the save already at `path` is untouched;
  // the files of this save are removed on failure only while they can never be committed
  // (docs/FORMAT.md 10, "Writing").
  counts_.assign(kCounts * n_, 0);
  staged_ = ProtocolName(path_, id_, "new");
  gate_ = ProtocolName(path_, id_, "commit");
  mine_ = o_.consolidate ? std::vector<int>{} : RanksWrittenBy(me_, np_, layout_.world_size());
  if (me_ == 0) {
    for (int r : mine_) registered_.Add(RankFileName(path_, id_, r));
    registered_.Add(staged_);
    registered_.Add(gate_);
  }
  if (o_.consolidate) {
    WriteConsolidated();
  } else if (Status a = WriteDistributed(); !a.ok()) {
    return GiveUp(a);
  }
  if (Status a = StageAndAgree(); !a.ok()) return GiveUp(a);
  rep_.bytes = bytes_;
  t1_ = Now();
  rep_.write_s = t1_ - t0_;

  // Prove: read back what was written, fingerprint each distinct piece once (its writer does),
  // sum over processes.
  if (Status e = OpenOutputAndGrids(); !e.ok()) return GiveUp(e);
  if (Status e = Prove(); !e.ok()) return GiveUp(e);
  TestFaultPoint(me_, "prove");
  rep_.prove_s = Now() - t1_;
  return Commit();
}

}  // namespace

Result<ReshardReport> Reshard(Exchange& comm, const Catalog& src, const Layout& layout,
                              const std::string& requested, const DistSaveOptions& options) {
  // Through a symbolic link: the save (master, rank files, lock) goes where it points.
  auto resolved = ResolveSymlinks(requested);
  SEEDSTORE_RETURN_IF_ERROR(Agree(comm, resolved.status(), "save: path"));
  const std::string& path = *resolved;
  // A save that replaces a file keeps its permissions: its new rank files get them too (the
  // master keeps them as any replaced file does).
  DistSaveOptions o = options;
  if (struct stat old;
      o.write.file_mode < 0 && ::stat(path.c_str(), &old) == 0 && S_ISREG(old.st_mode))
    o.write.file_mode = static_cast<int>(old.st_mode & 07777);
  SaveJob job(comm, src, layout, requested, path, o);
  return job.Run();
}

}  // namespace seedstore
