// ConfigError: what every config problem throws (malformed JSON, wrong type, out-of-range value,
// unknown key, contradicting batch sizes...). The message names the file and the JSON path so a
// user can find the line to fix; the parts are kept for tests and tools.
// Thread-safety: an immutable value.
#pragma once

#include <string>

#include "core/error.h"

namespace zrt {

class ConfigError : public InvalidArgument {
 public:
  // what() reads "[rank R] <source>: <path>: <problem>" ("<source>: <problem>" when the problem
  // has no single path, as with malformed JSON, whose problem holds the line and column).
  ConfigError(std::string source, std::string path, std::string problem);

  const std::string& source() const noexcept { return source_; }
  const std::string& path() const noexcept { return path_; }
  const std::string& problem() const noexcept { return problem_; }

 private:
  std::string source_;
  std::string path_;
  std::string problem_;
};

}  // namespace zrt
