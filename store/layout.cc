#include "store/layout.h"

#include <fnmatch.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <climits>
#include <cstring>
#include <numeric>
#include <utility>

#include "store/json_text.h"

namespace seedstore {
namespace {

using nlohmann::json;

std::string JoinShape(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t d = 0; d < shape.size(); ++d) {
    if (d) s += ", ";
    s += std::to_string(shape[d]);
  }
  return s + "]";
}

/// Short rendering of a JSON value for error messages.
std::string Show(const json& j) { return JsonPreview(j); }

const char* TypeName(const json& j) { return j.type_name(); }

Status Bad(const std::string& where, const std::string& what) {
  return InvalidArgument("layout: " + where + ": " + what);
}

/// "'data'(2) x 'pipeline'(4)"
std::string DescribeAxes(const Mesh& mesh, const std::vector<int>& axes) {
  std::string s;
  for (size_t i = 0; i < axes.size(); ++i) {
    if (i) s += " x ";
    s += Quoted(mesh.axes()[axes[i]]) + "(" + std::to_string(mesh.shape()[axes[i]]) + ")";
  }
  return s;
}

/// Checks that no mesh axis appears twice in `axes` (from rule `where`).
Status CheckAxes(const Mesh& mesh, const std::vector<int>& axes, const std::string& where,
                 std::vector<bool>* used) {
  for (int a : axes) {
    if (a < 0 || a >= mesh.num_axes())
      return Bad(where, "mesh axis index " + std::to_string(a) + " out of range (mesh has " +
                            std::to_string(mesh.num_axes()) + " axes)");
    if ((*used)[a]) return Bad(where, "mesh axis " + Quoted(mesh.axes()[a]) + " used twice");
    (*used)[a] = true;
  }
  return Status::Ok();
}

// ---- JSON helpers ---------------------------------------------------------------------

Status CheckKeys(const json& j, const std::string& where,
                 std::initializer_list<std::string_view> allowed) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (std::find(allowed.begin(), allowed.end(), it.key()) == allowed.end()) {
      std::string list;
      for (auto a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
      return Bad(where, "unknown field " + Quoted(it.key()) + " (allowed: " + list + ")");
    }
  }
  return Status::Ok();
}

Result<int> ParseInt(const json& j, const std::string& where) {
  if (!j.is_number_integer())
    return Bad(where, std::string("expected an integer, got ") + TypeName(j) + " " + Show(j));
  if (j.is_number_unsigned()) {
    const uint64_t v = j.get<uint64_t>();
    if (v > static_cast<uint64_t>(INT_MAX)) return Bad(where, "value " + Show(j) + " too large");
    return static_cast<int>(v);
  }
  const int64_t v = j.get<int64_t>();
  if (v > INT_MAX || v < INT_MIN) return Bad(where, "value " + Show(j) + " out of range");
  return static_cast<int>(v);
}

Result<std::string> ParseString(const json& j, const std::string& where) {
  if (!j.is_string())
    return Bad(where, std::string("expected a string, got ") + TypeName(j) + " " + Show(j));
  return j.get<std::string>();
}

Result<int> ParseAxisName(const Mesh& mesh, const json& j, const std::string& where) {
  SEEDSTORE_ASSIGN_OR_RETURN(std::string name, ParseString(j, where));
  const int a = mesh.AxisIndex(name);
  if (a < 0) {
    std::string list;
    for (const auto& n : mesh.axes()) list += (list.empty() ? "" : ", ") + n;
    return Bad(where, "unknown mesh axis " + Quoted(name) +
                          " (mesh axes: " + (list.empty() ? "none" : list) + ")");
  }
  return a;
}

/// A list of axis names, or a single axis name.
Result<std::vector<int>> ParseAxisList(const Mesh& mesh, const json& j, const std::string& where) {
  std::vector<int> axes;
  if (j.is_string()) {
    SEEDSTORE_ASSIGN_OR_RETURN(int a, ParseAxisName(mesh, j, where));
    axes.push_back(a);
    return axes;
  }
  if (!j.is_array())
    return Bad(where, std::string("expected an axis name or a list of axis names, got ") +
                          TypeName(j) + " " + Show(j));
  for (size_t i = 0; i < j.size(); ++i) {
    SEEDSTORE_ASSIGN_OR_RETURN(int a,
                               ParseAxisName(mesh, j[i], where + "[" + std::to_string(i) + "]"));
    axes.push_back(a);
  }
  return axes;
}

/// "Shard(d)" or PyTorch's repr "Shard(dim=d)" (d may be negative), or "Replicate()"; spaces
/// and tabs are allowed between the tokens, as Python would read them.
Result<Placement::DTensorEntry> ParseDTensorEntry(const json& j, const std::string& where) {
  SEEDSTORE_ASSIGN_OR_RETURN(std::string s, ParseString(j, where));
  size_t i = 0;
  auto blanks = [&] {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  };
  auto word = [&](const char* w) {  // the token `w` next (after blanks)
    blanks();
    const size_t n = std::strlen(w);
    if (s.compare(i, n, w) != 0) return false;
    i += n;
    return true;
  };
  auto end = [&] {
    blanks();
    return i == s.size();
  };
  Placement::DTensorEntry e;
  if (word("Replicate") && word("(") && word(")") && end()) return e;
  i = 0;
  if (word("Shard") && word("(")) {
    const size_t mark = i;
    if (!(word("dim") && word("="))) i = mark;
    blanks();
    const size_t num = i;
    if (i < s.size() && s[i] == '-') ++i;
    const size_t digits = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    if (i > digits && i - digits <= 6) {
      const int dim = std::stoi(s.substr(num, i - num));
      if (word(")") && end()) {
        e.shard = true;
        e.dim = dim;
        return e;
      }
    }
  }
  return Bad(where, "expected \"Shard(d)\", \"Shard(dim=d)\" or \"Replicate()\", got " + Quoted(s));
}

Result<Mesh> ParseMesh(const json& j) {
  if (!j.is_object())
    return Bad("mesh", std::string("expected an object, got ") + TypeName(j) + " " + Show(j));
  SEEDSTORE_RETURN_IF_ERROR(CheckKeys(j, "mesh", {"axes", "shape", "devices"}));
  if (!j.contains("axes")) return Bad("mesh", "missing field 'axes'");
  if (!j.contains("shape")) return Bad("mesh", "missing field 'shape'");
  const json& ja = j["axes"];
  const json& js = j["shape"];
  if (!ja.is_array())
    return Bad("mesh.axes", std::string("expected a list of names, got ") + TypeName(ja));
  if (!js.is_array())
    return Bad("mesh.shape", std::string("expected a list of sizes, got ") + TypeName(js));
  std::vector<std::string> axes;
  for (size_t i = 0; i < ja.size(); ++i) {
    SEEDSTORE_ASSIGN_OR_RETURN(std::string a,
                               ParseString(ja[i], "mesh.axes[" + std::to_string(i) + "]"));
    axes.push_back(std::move(a));
  }
  std::vector<int> shape;
  for (size_t i = 0; i < js.size(); ++i) {
    SEEDSTORE_ASSIGN_OR_RETURN(int s, ParseInt(js[i], "mesh.shape[" + std::to_string(i) + "]"));
    shape.push_back(s);
  }
  std::vector<int> devices;
  if (j.contains("devices")) {
    const json& jd = j["devices"];
    if (!jd.is_array())
      return Bad("mesh.devices", std::string("expected a flat list of ranks, got ") + TypeName(jd) +
                                     " " + Show(jd));
    for (size_t i = 0; i < jd.size(); ++i) {
      SEEDSTORE_ASSIGN_OR_RETURN(int d, ParseInt(jd[i], "mesh.devices[" + std::to_string(i) + "]"));
      devices.push_back(d);
    }
    if (devices.empty()) return Bad("mesh.devices", "empty list (omit the field for 0..N-1)");
  }
  return Mesh::Create(std::move(axes), std::move(shape), std::move(devices));
}

Result<PlacementRule> ParseRule(const Mesh& mesh, const json& j, const std::string& where) {
  if (!j.is_object())
    return Bad(where, std::string("expected an object, got ") + TypeName(j) + " " + Show(j));
  SEEDSTORE_RETURN_IF_ERROR(CheckKeys(j, where, {"match", "spec", "dtensor", "flat", "strict"}));
  PlacementRule rule;
  if (!j.contains("match")) return Bad(where, "missing field 'match'");
  SEEDSTORE_ASSIGN_OR_RETURN(rule.match, ParseString(j["match"], where + ".match"));
  const int kinds = j.contains("spec") + j.contains("dtensor") + j.contains("flat");
  if (kinds != 1)
    return Bad(where, kinds == 0 ? "needs one of 'spec', 'dtensor' or 'flat'"
                                 : "has more than one of 'spec', 'dtensor' and 'flat'");
  Placement& p = rule.placement;
  if (j.contains("strict")) {
    if (!j["strict"].is_boolean())
      return Bad(where + ".strict", std::string("expected true or false, got ") +
                                        TypeName(j["strict"]) + " " + Show(j["strict"]));
    p.strict = j["strict"].get<bool>();
  }
  if (j.contains("spec")) {
    const json& js = j["spec"];
    const std::string w = where + ".spec";
    if (!js.is_array())
      return Bad(w, std::string("expected a list (one entry per tensor dim), got ") + TypeName(js) +
                        " " + Show(js));
    p.kind = Placement::Kind::kSpec;
    for (size_t d = 0; d < js.size(); ++d) {
      const std::string wd = w + "[" + std::to_string(d) + "]";
      if (js[d].is_null()) {
        p.spec.emplace_back();
      } else {
        SEEDSTORE_ASSIGN_OR_RETURN(std::vector<int> axes, ParseAxisList(mesh, js[d], wd));
        p.spec.push_back(std::move(axes));
      }
    }
  } else if (j.contains("dtensor")) {
    const json& jt = j["dtensor"];
    const std::string w = where + ".dtensor";
    if (!jt.is_array())
      return Bad(w, std::string("expected a list (one entry per mesh axis), got ") + TypeName(jt) +
                        " " + Show(jt));
    p.kind = Placement::Kind::kDTensor;
    for (size_t i = 0; i < jt.size(); ++i) {
      SEEDSTORE_ASSIGN_OR_RETURN(Placement::DTensorEntry e,
                                 ParseDTensorEntry(jt[i], w + "[" + std::to_string(i) + "]"));
      p.dtensor.push_back(e);
    }
  } else {
    p.kind = Placement::Kind::kFlat;
    SEEDSTORE_ASSIGN_OR_RETURN(p.flat_axes, ParseAxisList(mesh, j["flat"], where + ".flat"));
  }
  return rule;
}

// ---- shard computation ----------------------------------------------------------------

/// A placement checked against one tensor's shape, ready to evaluate for any coordinates.
struct Resolved {
  Placement::Kind kind = Placement::Kind::kReplicated;
  int ndim = 0;
  uint64_t shape[kMaxRank] = {};
  uint64_t numel = 1;
  std::vector<std::vector<int>> dim_axes;  // kSpec: per dim, mesh axes (outermost first)
  std::vector<int> dtensor_dim;            // kDTensor: per mesh axis, tensor dim or -1
  std::vector<int> flat_axes;              // kFlat
};

Region EvalRegion(const Mesh& mesh, const Resolved& r, const std::vector<int>& coords) {
  Region g = WholeRegion(r.ndim, r.shape);
  if (r.ndim == 0) return g;  // scalars: every rank holds the one element
  switch (r.kind) {
    case Placement::Kind::kReplicated:
      break;
    case Placement::Kind::kSpec:
      for (size_t d = 0; d < r.dim_axes.size(); ++d) {
        if (r.dim_axes[d].empty()) continue;
        uint64_t k = 1, idx = 0;
        for (int a : r.dim_axes[d]) {
          k *= static_cast<uint64_t>(mesh.shape()[a]);
          idx = idx * static_cast<uint64_t>(mesh.shape()[a]) + static_cast<uint64_t>(coords[a]);
        }
        ChunkRange(r.shape[d], k, idx, &g.start[d], &g.stop[d]);
      }
      break;
    case Placement::Kind::kDTensor:
      for (size_t a = 0; a < r.dtensor_dim.size(); ++a) {
        const int d = r.dtensor_dim[a];
        if (d < 0) continue;
        uint64_t b, e;
        ChunkRange(g.stop[d] - g.start[d], static_cast<uint64_t>(mesh.shape()[a]),
                   static_cast<uint64_t>(coords[a]), &b, &e);
        g.stop[d] = g.start[d] + e;
        g.start[d] += b;
      }
      // torch's compute_local_shape_and_global_offset reports an empty piece of a dim at
      // offset = the dim's full size (not at the end of the parent piece): so do we.
      for (int d = 0; d < r.ndim; ++d)
        if (g.start[d] == g.stop[d]) g.start[d] = g.stop[d] = r.shape[d];
      break;
    case Placement::Kind::kFlat: {
      uint64_t k = 1, idx = 0;
      for (int a : r.flat_axes) {
        k *= static_cast<uint64_t>(mesh.shape()[a]);
        idx = idx * static_cast<uint64_t>(mesh.shape()[a]) + static_cast<uint64_t>(coords[a]);
      }
      g.flat = true;
      ChunkRange(r.numel, k, idx, &g.begin, &g.end);
      for (int d = 0; d < r.ndim; ++d) g.start[d] = g.stop[d] = 0;
      break;
    }
  }
  return g;
}

std::vector<int> CoordsOfPosition(const Mesh& mesh, int position) {
  std::vector<int> c(mesh.num_axes());
  for (int a = mesh.num_axes() - 1; a >= 0; --a) {
    c[a] = position % mesh.shape()[a];
    position /= mesh.shape()[a];
  }
  return c;
}

}  // namespace

// ---- Mesh -------------------------------------------------------------------------------

Result<Mesh> Mesh::Create(std::vector<std::string> axes, std::vector<int> shape,
                          std::vector<int> devices) {
  if (axes.size() != shape.size())
    return Bad("mesh", "'axes' has " + std::to_string(axes.size()) + " names but 'shape' has " +
                           std::to_string(shape.size()) + " sizes");
  int64_t world = 1;
  for (size_t i = 0; i < axes.size(); ++i) {
    const std::string w = "mesh.axes[" + std::to_string(i) + "]";
    if (axes[i].empty()) return Bad(w, "empty axis name");
    for (size_t k = 0; k < i; ++k)
      if (axes[k] == axes[i]) return Bad(w, "axis name " + Quoted(axes[i]) + " repeated");
    if (shape[i] < 1)
      return Bad(
          "mesh.shape[" + std::to_string(i) + "]",
          "size of axis " + Quoted(axes[i]) + " must be positive, got " + std::to_string(shape[i]));
    world *= shape[i];
    if (world > INT_MAX)
      return Bad("mesh.shape", "world size exceeds " + std::to_string(INT_MAX) + " ranks");
  }
  Mesh m;
  m.world_ = static_cast<int>(world);
  m.axes_ = std::move(axes);
  m.shape_ = std::move(shape);
  m.position_of_.assign(m.world_, -1);
  if (devices.empty()) {
    m.devices_.resize(m.world_);
    std::iota(m.devices_.begin(), m.devices_.end(), 0);
    std::iota(m.position_of_.begin(), m.position_of_.end(), 0);
    return m;
  }
  if (static_cast<int64_t>(devices.size()) != world)
    return Bad("mesh.devices", "has " + std::to_string(devices.size()) +
                                   " entries, expected the mesh's " + std::to_string(world) +
                                   " ranks");
  for (size_t p = 0; p < devices.size(); ++p) {
    const std::string w = "mesh.devices[" + std::to_string(p) + "]";
    const int d = devices[p];
    if (d < 0 || d >= m.world_)
      return Bad(w, "rank " + std::to_string(d) + " outside 0.." + std::to_string(m.world_ - 1) +
                        " (devices must be a permutation of the ranks)");
    if (m.position_of_[d] >= 0)
      return Bad(w, "rank " + std::to_string(d) + " listed twice (also at position " +
                        std::to_string(m.position_of_[d]) +
                        "; devices must be a permutation of the ranks)");
    m.position_of_[d] = static_cast<int>(p);
  }
  m.devices_ = std::move(devices);
  for (int p = 0; p < m.world_; ++p)
    if (m.devices_[p] != p) m.explicit_devices_ = true;
  return m;
}

int Mesh::AxisIndex(std::string_view name) const {
  for (size_t i = 0; i < axes_.size(); ++i)
    if (axes_[i] == name) return static_cast<int>(i);
  return -1;
}

Result<std::vector<int>> Mesh::Coords(int rank) const {
  if (rank < 0 || rank >= world_)
    return InvalidArgument("layout: rank " + std::to_string(rank) + " outside the mesh of " +
                           std::to_string(world_) + " ranks");
  return CoordsOfPosition(*this, position_of_[rank]);
}

int Mesh::RankAt(const std::vector<int>& coords) const {
  int p = 0;
  for (int a = 0; a < num_axes(); ++a) p = p * shape_[a] + coords[a];
  return devices_[p];
}

// ---- Layout ----------------------------------------------------------------------------

Result<Layout> Layout::Create(Mesh mesh, std::vector<PlacementRule> rules, bool strict) {
  for (size_t i = 0; i < rules.size(); ++i) {
    const Placement& p = rules[i].placement;
    const std::string where = "placements[" + std::to_string(i) + "]";
    std::vector<bool> used(mesh.num_axes(), false);
    switch (p.kind) {
      case Placement::Kind::kReplicated:
        break;
      case Placement::Kind::kSpec:
        for (const auto& axes : p.spec)
          SEEDSTORE_RETURN_IF_ERROR(CheckAxes(mesh, axes, where + ".spec", &used));
        break;
      case Placement::Kind::kDTensor:
        if (static_cast<int>(p.dtensor.size()) != mesh.num_axes())
          return Bad(where + ".dtensor", "has " + std::to_string(p.dtensor.size()) +
                                             " entries, expected one per mesh axis (" +
                                             std::to_string(mesh.num_axes()) + ")");
        break;
      case Placement::Kind::kFlat:
        SEEDSTORE_RETURN_IF_ERROR(CheckAxes(mesh, p.flat_axes, where + ".flat", &used));
        break;
    }
  }
  Layout l;
  l.mesh_ = std::move(mesh);
  l.rules_ = std::move(rules);
  l.strict_ = strict;
  return l;
}

Result<Layout> Layout::FromJson(const json& j) {
  if (!j.is_object())
    return InvalidArgument(std::string("layout: expected a JSON object, got ") + TypeName(j) + " " +
                           Show(j));
  SEEDSTORE_RETURN_IF_ERROR(CheckKeys(j, "top level", {"mesh", "placements", "strict"}));
  if (!j.contains("mesh")) return InvalidArgument("layout: missing field 'mesh'");
  SEEDSTORE_ASSIGN_OR_RETURN(Mesh mesh, ParseMesh(j["mesh"]));
  bool strict = false;
  if (j.contains("strict")) {
    if (!j["strict"].is_boolean())
      return Bad("strict", std::string("expected true or false, got ") + TypeName(j["strict"]) +
                               " " + Show(j["strict"]));
    strict = j["strict"].get<bool>();
  }
  std::vector<PlacementRule> rules;
  if (j.contains("placements")) {
    const json& jp = j["placements"];
    if (!jp.is_array())
      return Bad("placements",
                 std::string("expected a list of rules, got ") + TypeName(jp) + " " + Show(jp));
    for (size_t i = 0; i < jp.size(); ++i) {
      SEEDSTORE_ASSIGN_OR_RETURN(PlacementRule r,
                                 ParseRule(mesh, jp[i], "placements[" + std::to_string(i) + "]"));
      rules.push_back(std::move(r));
    }
  }
  return Create(std::move(mesh), std::move(rules), strict);
}

Result<Layout> Layout::Parse(std::string_view text, std::string_view origin) {
  std::string err;
  const json j = ParseJson(text, &err);
  if (j.is_discarded()) return InvalidArgument(std::string(origin) + ": layout: " + err);
  Result<Layout> r = FromJson(j);
  if (!r.ok()) return r.status().WithContext(std::string(origin));
  return r;
}

Result<Layout> Layout::Load(const std::string& path) {
  SEEDSTORE_ASSIGN_OR_RETURN(const std::string text,
                             ReadTextFile(path, "layout file " + Quoted(path)));
  return Parse(text, "file " + Quoted(path));
}

Layout Layout::Replicated(int world) {
  assert(world >= 1);
  Layout l;
  l.mesh_ = Mesh::Create({"data"}, {world}).value();
  return l;
}

Layout Layout::Fsdp(int world) {
  Layout l = Replicated(world);
  PlacementRule r;
  r.match = "*";
  r.placement.kind = Placement::Kind::kFlat;
  r.placement.flat_axes = {0};
  l.rules_.push_back(r);
  return l;
}

Layout Layout::Hsdp(int replicate, int shard) {
  assert(replicate >= 1 && shard >= 1 &&
         static_cast<int64_t>(replicate) * shard <= static_cast<int64_t>(INT_MAX));
  Layout l;
  l.mesh_ = Mesh::Create({"replicate", "shard"}, {replicate, shard}).value();
  PlacementRule r;
  r.match = "*";
  r.placement.kind = Placement::Kind::kFlat;
  r.placement.flat_axes = {1};
  l.rules_.push_back(r);
  return l;
}

json Layout::ToJson() const {
  json j;
  j["mesh"]["axes"] = mesh_.axes();
  j["mesh"]["shape"] = mesh_.shape();
  if (mesh_.has_explicit_devices()) j["mesh"]["devices"] = mesh_.devices();
  if (strict_) j["strict"] = true;
  json rules = json::array();
  for (const auto& rule : rules_) {
    const Placement& p = rule.placement;
    json r;
    r["match"] = rule.match;
    switch (p.kind) {
      case Placement::Kind::kReplicated:
        r["spec"] = json::array();
        break;
      case Placement::Kind::kSpec: {
        json s = json::array();
        for (const auto& axes : p.spec) {
          if (axes.empty()) {
            s.push_back(nullptr);
          } else if (axes.size() == 1) {
            s.push_back(mesh_.axes()[axes[0]]);
          } else {
            json l = json::array();
            for (int a : axes) l.push_back(mesh_.axes()[a]);
            s.push_back(l);
          }
        }
        r["spec"] = s;
        break;
      }
      case Placement::Kind::kDTensor: {
        json s = json::array();
        for (const auto& e : p.dtensor)
          s.push_back(e.shard ? "Shard(" + std::to_string(e.dim) + ")" : "Replicate()");
        r["dtensor"] = s;
        break;
      }
      case Placement::Kind::kFlat: {
        json s = json::array();
        for (int a : p.flat_axes) s.push_back(mesh_.axes()[a]);
        r["flat"] = s;
        break;
      }
    }
    if (p.strict) r["strict"] = *p.strict;
    rules.push_back(r);
  }
  j["placements"] = rules;
  return j;
}

int Layout::MatchRule(const std::string& tensor_name) const {
  for (size_t i = 0; i < rules_.size(); ++i)
    if (fnmatch(rules_[i].match.c_str(), tensor_name.c_str(), 0) == 0) return static_cast<int>(i);
  return -1;
}

namespace {

/// Validates `rule` (or replication when null) against the tensor and resolves it.
Result<Resolved> Resolve(const Mesh& mesh, const std::string& name,
                         const std::vector<uint64_t>& shape, const PlacementRule* rule,
                         int rule_index, bool layout_strict) {
  const std::string tensor = "tensor " + Quoted(name) + " of shape " + JoinShape(shape);
  if (shape.size() > static_cast<size_t>(kMaxRank))
    return InvalidArgument("layout: " + tensor + ": rank " + std::to_string(shape.size()) +
                           " exceeds the maximum of " + std::to_string(kMaxRank) + " dims");
  Resolved r;
  r.ndim = static_cast<int>(shape.size());
  for (int d = 0; d < r.ndim; ++d) {
    r.shape[d] = shape[d];
    if (__builtin_mul_overflow(r.numel, shape[d], &r.numel))
      return InvalidArgument("layout: " + tensor + ": element count exceeds 2^64 - 1");
  }
  if (rule == nullptr) return r;
  const Placement& p = rule->placement;
  const bool strict = p.strict.value_or(layout_strict);
  const std::string where = "layout: placements[" + std::to_string(rule_index) + "] (match " +
                            Quoted(rule->match) + ") on " + tensor;
  auto not_divisible = [&](const std::string& what, uint64_t size, uint64_t k,
                           const std::vector<int>& axes) {
    return InvalidArgument(where + ": " + what + " of size " + std::to_string(size) +
                           " is not divisible by " + std::to_string(k) + " = mesh axes " +
                           DescribeAxes(mesh, axes) + " (strict mode)");
  };
  r.kind = p.kind;
  switch (p.kind) {
    case Placement::Kind::kReplicated:
      break;
    case Placement::Kind::kSpec: {
      if (p.spec.size() > shape.size())
        return InvalidArgument(where + ": spec has " + std::to_string(p.spec.size()) +
                               " entries, more than the tensor's rank " +
                               std::to_string(shape.size()));
      r.dim_axes = p.spec;
      if (strict) {
        for (size_t d = 0; d < p.spec.size(); ++d) {
          uint64_t k = 1;
          for (int a : p.spec[d]) k *= static_cast<uint64_t>(mesh.shape()[a]);
          if (shape[d] % k != 0)
            return not_divisible("dim " + std::to_string(d), shape[d], k, p.spec[d]);
        }
      }
      break;
    }
    case Placement::Kind::kDTensor: {
      r.dtensor_dim.assign(p.dtensor.size(), -1);
      std::vector<std::vector<int>> per_dim(shape.size());
      for (size_t a = 0; a < p.dtensor.size(); ++a) {
        const auto& e = p.dtensor[a];
        if (!e.shard) continue;
        const int d = e.dim < 0 ? e.dim + r.ndim : e.dim;
        if (d < 0 || d >= r.ndim)
          return InvalidArgument(where + ": dtensor[" + std::to_string(a) + "] Shard(" +
                                 std::to_string(e.dim) + ") out of range for rank " +
                                 std::to_string(r.ndim));
        r.dtensor_dim[a] = d;
        per_dim[d].push_back(static_cast<int>(a));
      }
      if (strict) {
        for (int d = 0; d < r.ndim; ++d) {
          uint64_t k = 1;
          for (int a : per_dim[d]) k *= static_cast<uint64_t>(mesh.shape()[a]);
          if (shape[d] % k != 0)
            return not_divisible("dim " + std::to_string(d), shape[d], k, per_dim[d]);
        }
      }
      break;
    }
    case Placement::Kind::kFlat: {
      r.flat_axes = p.flat_axes;
      if (strict && r.ndim > 0) {
        uint64_t k = 1;
        for (int a : p.flat_axes) k *= static_cast<uint64_t>(mesh.shape()[a]);
        if (r.numel % k != 0) return not_divisible("element count", r.numel, k, p.flat_axes);
      }
      break;
    }
  }
  return r;
}

}  // namespace

Result<Shard> Layout::ShardOf(const std::string& tensor_name, const std::vector<uint64_t>& shape,
                              int rank) const {
  SEEDSTORE_ASSIGN_OR_RETURN(std::vector<int> coords, mesh_.Coords(rank));
  const int ri = MatchRule(tensor_name);
  SEEDSTORE_ASSIGN_OR_RETURN(Resolved res, Resolve(mesh_, tensor_name, shape,
                                                   ri < 0 ? nullptr : &rules_[ri], ri, strict_));
  Shard s;
  s.region = EvalRegion(mesh_, res, coords);
  for (int p = 0; p < mesh_.world_size(); ++p) {
    const int other = mesh_.devices()[p];
    if (other == rank || SameRegion(EvalRegion(mesh_, res, CoordsOfPosition(mesh_, p)), s.region))
      s.replicas.push_back(other);
  }
  std::sort(s.replicas.begin(), s.replicas.end());
  s.replica_index = static_cast<int>(std::lower_bound(s.replicas.begin(), s.replicas.end(), rank) -
                                     s.replicas.begin());
  return s;
}

Result<std::vector<Shard>> Layout::DistinctShards(const std::string& tensor_name,
                                                  const std::vector<uint64_t>& shape) const {
  const int ri = MatchRule(tensor_name);
  SEEDSTORE_ASSIGN_OR_RETURN(Resolved res, Resolve(mesh_, tensor_name, shape,
                                                   ri < 0 ? nullptr : &rules_[ri], ri, strict_));
  // Equal regions found through an open-addressing table of shard indexes keyed by a hash of
  // the region's coordinates (a world of 1,024 flat ranks is 1,024 distinct regions per tensor,
  // and a save of 723 tensors asks for them all).
  const size_t world = static_cast<size_t>(mesh_.world_size());
  size_t slots = 4;
  while (slots < 2 * world) slots *= 2;
  std::vector<int> table(slots, -1);
  std::vector<Shard> out;
  std::vector<uint64_t> key;
  for (size_t p = 0; p < world; ++p) {
    const Region g = EvalRegion(mesh_, res, CoordsOfPosition(mesh_, static_cast<int>(p)));
    key.assign(1, g.flat ? 1u : 0u);
    AppendRegionCoords(g, &key);
    uint64_t h = 0;
    for (const uint64_t x : key) h = (h ^ x) * 0x9E3779B97F4A7C15ull + (h >> 29);
    size_t at = static_cast<size_t>(h ^ (h >> 32)) & (slots - 1);
    while (table[at] >= 0 && !SameRegion(out[table[at]].region, g)) at = (at + 1) & (slots - 1);
    if (table[at] < 0) {
      table[at] = static_cast<int>(out.size());
      out.emplace_back();
      out.back().region = g;
    }
    out[table[at]].replicas.push_back(mesh_.devices()[p]);
  }
  for (auto& s : out) std::sort(s.replicas.begin(), s.replicas.end());
  // Each rank is in one shard, so the order is the same whichever sort gives it.
  auto by_owner = [](const Shard& a, const Shard& b) { return a.replicas[0] < b.replicas[0]; };
  if (!std::is_sorted(out.begin(), out.end(), by_owner))
    std::sort(out.begin(), out.end(), by_owner);
  return out;
}

// ---- free functions --------------------------------------------------------------------

void ChunkRange(uint64_t n, uint64_t k, uint64_t i, uint64_t* begin, uint64_t* end) {
  const unsigned __int128 c = n / k + (n % k != 0 ? 1 : 0);
  const unsigned __int128 b = c * i, e = c * (i + 1);
  *begin = static_cast<uint64_t>(std::min<unsigned __int128>(b, n));
  *end = static_cast<uint64_t>(std::min<unsigned __int128>(e, n));
}

json RegionToJson(const Region& r) {
  if (r.flat) return json{{"flat", {r.begin, r.end}}};
  json st = json::array(), sp = json::array();
  for (int d = 0; d < r.rank; ++d) {
    st.push_back(r.start[d]);
    sp.push_back(r.stop[d]);
  }
  return json{{"start", st}, {"stop", sp}};
}

void AppendRegionJson(std::string& out, const Region& r) {
  if (r.flat) {
    const uint64_t be[2] = {r.begin, r.end};
    out += "{\"flat\":[";
    AppendJsonIntegers(out, be, 2);
    out += "]}";
    return;
  }
  out += "{\"start\":[";
  AppendJsonIntegers(out, r.start, static_cast<size_t>(r.rank));
  out += "],\"stop\":[";
  AppendJsonIntegers(out, r.stop, static_cast<size_t>(r.rank));
  out += "]}";
}

Result<Region> RegionFromJson(const json& j, const std::vector<uint64_t>& shape) {
  auto u64s = [](const json& a, std::vector<uint64_t>* out) {
    if (!a.is_array()) return false;
    for (const json& v : a) {
      if (!v.is_number_unsigned()) return false;
      out->push_back(v.get<uint64_t>());
    }
    return true;
  };
  if (!j.is_object()) return Corrupt("region is not a JSON object");
  if (shape.size() > static_cast<size_t>(kMaxRank)) return Corrupt("bad box rank");
  if (j.contains("flat")) {
    std::vector<uint64_t> be;
    if (!u64s(j["flat"], &be) || be.size() != 2) return Corrupt("bad flat range");
    unsigned __int128 n = 1;
    for (uint64_t s : shape) n *= s;
    if (be[0] > be[1] || be[1] > n) return Corrupt("bad flat range");
    return FlatRegion(shape, be[0], be[1]);
  }
  std::vector<uint64_t> st, sp;
  if (!j.contains("start") || !j.contains("stop") || !u64s(j["start"], &st) ||
      !u64s(j["stop"], &sp))
    return Corrupt("bad box (start and stop must be arrays of unsigned integers)");
  if (st.size() != shape.size() || sp.size() != shape.size()) return Corrupt("bad box rank");
  for (size_t d = 0; d < shape.size(); ++d)
    if (st[d] > sp[d] || sp[d] > shape[d]) return Corrupt("bad box bounds");
  return BoxRegion(shape, st, sp);
}

}  // namespace seedstore
