#include "io/save_plan.h"

namespace seedstore {

void NumberPieces(Plan* p) {
  p->first_piece.assign(1, 0);
  for (const auto& s : p->pieces) p->first_piece.push_back(p->first_piece.back() + s.size());
}

Result<Plan> MakePlan(const Catalog& src, const Layout& layout) {
  Plan p;
  for (const TensorRecord& t : src.tensors()) {
    std::vector<DistCatalog::Piece> keep;
    if (t.lazy) {  // no pieces, but the layout must still apply to it (as it would once dense)
      SEEDSTORE_RETURN_IF_ERROR(layout.ShardOf(t.name, t.shape, 0).status());
    } else {
      SEEDSTORE_ASSIGN_OR_RETURN(std::vector<Shard> all, layout.DistinctShards(t.name, t.shape));
      for (const Shard& s : all)
        if (!s.empty()) keep.emplace_back(s.replicas[0], s.region);
    }
    p.pieces.push_back(std::move(keep));
  }
  return p;
}

PieceReports PieceReports::For(const Plan& plan) {
  PieceReports r;
  for (const auto& pieces : plan.pieces)
    for (const DistCatalog::Piece& p : pieces) {
      const Region g = p.stored();
      r.at.push_back(r.words.size());
      r.words.resize(r.words.size() + 4 + (g.flat ? 1 : g.rank), 0);
    }
  r.at.push_back(r.words.size());
  return r;
}

void PieceReports::Set(size_t p, const Fingerprint& f, const std::optional<PieceCells>& cells) {
  uint64_t* w = words.data() + at[p];
  w[0] = f.lane0;
  w[1] = f.lane1;
  if (!cells || cells->chunk.size() != at[p + 1] - at[p] - 4) return;
  w[2] = static_cast<uint64_t>(cells->set) + 1;
  w[3] = cells->first;
  std::copy(cells->chunk.begin(), cells->chunk.end(), w + 4);
}

Fingerprint PieceReports::fingerprint(size_t p) const {
  return Fingerprint{words[at[p]], words[at[p] + 1]};
}

std::optional<PieceCells> PieceReports::cells(size_t p) const {
  const uint64_t* w = words.data() + at[p];
  if (w[2] == 0) return std::nullopt;
  return PieceCells{static_cast<int>(w[2] - 1), w[3],
                    std::vector<uint64_t>(w + 4, words.data() + at[p + 1])};
}

std::vector<DistCatalog::Piece> PlannedPieces(const Plan& plan, size_t i,
                                              const PieceReports* reports) {
  std::vector<DistCatalog::Piece> ps = plan.pieces[i];
  if (reports)
    for (size_t k = 0; k < ps.size(); ++k) ps[k].set_cells(reports->cells(plan.first_piece[i] + k));
  return ps;
}

int WriterOf(int r, int np, int world) {
  return static_cast<int>((int64_t{r + 1} * np - 1) / world);
}
std::vector<int> RanksWrittenBy(int me, int np, int world) {
  std::vector<int> r;
  for (int k = static_cast<int>(int64_t{me} * world / np); k < int64_t{me + 1} * world / np; ++k)
    r.push_back(k);
  return r;
}

}  // namespace seedstore
