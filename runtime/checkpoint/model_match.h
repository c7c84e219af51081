// Whether a checkpoint or a weights file matches the engine's model: the names, shapes, order
// and optimizer states that differ, as lines for an error that lists them all.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace zrt::checkpoint {

struct NamedShape {
  std::string name;
  std::vector<std::int64_t> shape;
};

// Missing, extra and reshaped names between what a source has and what the engine registered.
// Engine names in `mayBeMissing` are not reported when the source lacks them.
std::vector<std::string> nameDifferences(const std::vector<NamedShape>& source, const std::vector<NamedShape>& engine,
                                         const std::string& sourceName, const std::set<std::string>& mayBeMissing = {});

// Throws InvalidArgument listing `diffs` for the source at `where`.
[[noreturn]] void throwDifferences(const std::string& where, const std::vector<std::string>& diffs);

}  // namespace zrt::checkpoint
