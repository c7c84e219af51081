// Turning config text into JSON: nlohmann-json's parser with the checks DeepSpeed's loader makes
// (duplicate keys are an error) and errors a person can act on: malformed JSON is reported with
// the line and column, computed from the parser's byte offset, and the offending line.
// Comments (// and /* */) are allowed, as DeepSpeed's hjson loader allows them.
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace zrt {

struct TextPosition {
  std::size_t line = 1;    // 1-based
  std::size_t column = 1;  // 1-based, in bytes
};

// The line and column of the byte at 0-based `offset` in `text` (clamped to the text's end).
TextPosition textPosition(std::string_view text, std::size_t offset);

// Parses `text`; throws ConfigError naming `source` on malformed JSON (with line and column)
// and on a key repeated within one object (with its JSON path).
nlohmann::json parseJsonText(const std::string& text, const std::string& source);

}  // namespace zrt
