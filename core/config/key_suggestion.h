// Suggestions for misspelt keys: the known key nearest to an unknown one by edit distance, so
// "nvme_pth" gets "did you mean 'nvme_path'?". Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace zrt {

// Levenshtein distance (insertions, deletions, substitutions; each costs 1).
std::size_t editDistance(std::string_view a, std::string_view b);

// The candidate nearest to `word`, or "" when none is close enough to be a plausible typo
// (distance above a third of the longer word, and above 2). Ties go to the first candidate.
std::string nearestKey(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace zrt
