#include "io/store_rewrite.h"

#include "io/rank_files.h"
#include "io/store_writer.h"

namespace seedstore {

Status RewriteOfMasterRefused(const std::string& path) {
  return InvalidArgument(
      "file '" + path +
      "' is a distributed save's master: tensors are replaced in a one-file store "
      "(`seedstore reshard " +
      path + " --consolidate -o STORE` makes one)");
}

Status CheckRewritableAsStore(const H5Store& store, const std::string& path) {
  if (store.distributed_master()) return RewriteOfMasterRefused(path);
  std::string save;
  uint32_t id = 0;
  int rank = 0;
  if (!ParseRankFileName(path, &save, &id, &rank)) return Status::Ok();
  if (!IsDistributedSave(save)) return Status::Ok();  // its seal checked before HDF5 reads it
  return InvalidArgument("file '" + path + "' is rank " + std::to_string(rank) +
                         "'s file of the distributed save '" + save +
                         "': rewritten alone it would no longer match the piece fingerprints the "
                         "save's index records, and the save would fail to verify and read; update "
                         "the save instead (`seedstore reshard " +
                         save +
                         " --consolidate -o STORE`, update STORE, then `seedstore reshard STORE "
                         "--layout LAYOUT -o " +
                         save + "`)");
}

Status ReplaceWithDense(const std::string& path, const std::map<std::string, BoxSource>& values,
                        WriteOptions options, std::function<void(uint64_t)> progress) {
  SEEDSTORE_ASSIGN_OR_RETURN(std::unique_ptr<H5Store> src, H5Store::Open(path));
  SEEDSTORE_RETURN_IF_ERROR(CheckRewritableAsStore(*src, path));
  for (const auto& [name, _] : values)
    if (src->Find(name) < 0) return NotFound("file '" + path + "': no tensor '" + name + "'");
  SEEDSTORE_ASSIGN_OR_RETURN(
      std::unique_ptr<StoreWriter> w,
      StoreWriter::Create(path, src->root_seed(), src->generator(), options));
  w->SetShardRank(src->shard_rank());  // a rank's shard file stays that rank's
  for (size_t i = 0; i < src->tensors().size(); ++i) {
    const TensorRecord& t = src->tensors()[i];
    auto it = values.find(t.name);
    if (it == values.end()) {
      SEEDSTORE_RETURN_IF_ERROR(w->CopyFrom(*src, i));
    } else {
      DenseChunking keep;  // a piece (a rank file's tensor) stays the same piece
      keep.piece = t.piece;
      SEEDSTORE_RETURN_IF_ERROR(w->AddDense(t.name, t.shape, t.dtype, it->second, progress, keep));
    }
  }
  return w->Commit();
}

}  // namespace seedstore
