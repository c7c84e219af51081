#include "runtime/checkpoint/model_match.h"

#include <map>

#include "core/error.h"
#include "runtime/checkpoint/checkpoint.h"

namespace zrt::checkpoint {
namespace {

std::string shapeText(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string joinNames(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return "[" + s + "]";
}

}  // namespace

std::vector<std::string> nameDifferences(const std::vector<NamedShape>& source, const std::vector<NamedShape>& engine,
                                         const std::string& sourceName, const std::set<std::string>& mayBeMissing) {
  std::vector<std::string> out;
  std::map<std::string, const NamedShape*> byName;
  for (const NamedShape& s : source) byName[s.name] = &s;
  std::set<std::string> seen;
  for (const NamedShape& e : engine) {
    auto it = byName.find(e.name);
    seen.insert(e.name);
    if (it == byName.end()) {
      if (!mayBeMissing.count(e.name))
        out.push_back("'" + e.name + "' " + shapeText(e.shape) + ": missing from the " + sourceName);
    }
    else if (it->second->shape != e.shape)
      out.push_back("'" + e.name + "': shape " + shapeText(it->second->shape) + " in the " + sourceName + ", " +
                    shapeText(e.shape) + " in this model");
  }
  for (const NamedShape& s : source)
    if (!seen.count(s.name)) out.push_back("'" + s.name + "' " + shapeText(s.shape) + ": in the " + sourceName + ", not in this model");
  return out;
}

[[noreturn]] void throwDifferences(const std::string& where, const std::vector<std::string>& diffs) {
  std::string text;
  for (const std::string& d : diffs) text += "\n  " + d;
  ZRT_THROW(InvalidArgument, "checkpoint: ", where, " does not match this engine's model (", diffs.size(),
            diffs.size() == 1 ? " difference):" : " differences):", text);
}

std::string safetensorsName(const std::string& module, const std::string& param) { return module + "." + param; }

std::vector<std::string> modelDifferences(const Manifest& m, const EngineView& v, bool exact,
                                          const std::vector<std::string>& mayBeMissing) {
  std::vector<std::string> out;
  if (exact && m.dtype != v.dtype)
    out.push_back(detail::cat("training dtype: ", nameOf(m.dtype), " in the checkpoint, ", nameOf(v.dtype),
                              " in this engine (load() resumes in the same precision; loadWeights() converts)"));
  std::vector<NamedShape> source, engine;
  for (const ManifestParam& p : m.params) source.push_back({p.fullName(), p.shape});
  for (const EngineView::Param& p : v.params) engine.push_back({p.module + "/" + p.name, p.shape});
  const std::set<std::string> optional(mayBeMissing.begin(), mayBeMissing.end());
  for (std::string& d : nameDifferences(source, engine, "checkpoint", optional)) out.push_back(std::move(d));
  if (!exact) return out;
  for (const EngineView::Param& p : v.params) {
    const ManifestParam* q = m.param(p.module + "/" + p.name);
    if (!q || q->shape != p.shape) continue;
    if (q->trainable != p.trainable)
      out.push_back("'" + q->fullName() + "': " + (q->trainable ? "trainable" : "frozen") + " in the checkpoint, " +
                    (p.trainable ? "trainable" : "frozen") + " in this model");
    else if (q->offset != p.offset)
      out.push_back(detail::cat("'", q->fullName(), "': at element ", q->offset, " of the flat buffer in the checkpoint, ",
                                p.offset, " in this model (registered in another order)"));
  }
  std::vector<std::string> ours;
  for (const std::string& n : v.momentNames) ours.push_back(n);
  std::vector<std::string> theirs;
  for (const ManifestState& s : m.states)
    if (s.name != "params" && s.name != "frozen_params" && s.name != "master") theirs.push_back(s.name);
  if (ours != theirs)
    out.push_back("optimizer state: " + joinNames(theirs) + " (" + m.optimizer + ") in the checkpoint, " +
                  joinNames(ours) + " (" + v.optimizer + ") in this engine");
  return out;
}

}  // namespace zrt::checkpoint
