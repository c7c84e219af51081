#include "core/config/config_error.h"

namespace zrt {
namespace {

std::string message(const std::string& source, const std::string& path,
                    const std::string& problem) {
  std::string out;
  if (int rank = processRank(); rank >= 0) out = detail::cat("[rank ", rank, "] ");
  out += source + ": ";
  if (!path.empty()) out += path + ": ";
  return out + problem;
}

}  // namespace

ConfigError::ConfigError(std::string source, std::string path, std::string problem)
    : InvalidArgument(message(source, path, problem)),
      source_(std::move(source)),
      path_(std::move(path)),
      problem_(std::move(problem)) {}

}  // namespace zrt
