#include "core/config/json_text.h"

#include <set>
#include <vector>

#include "core/config/config_error.h"

namespace zrt {

TextPosition textPosition(std::string_view text, std::size_t offset) {
  if (offset > text.size()) offset = text.size();
  TextPosition pos;
  for (std::size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') {
      ++pos.line;
      pos.column = 1;
    } else {
      ++pos.column;
    }
  }
  return pos;
}

namespace {

// nlohmann's message reads "[json.exception.parse_error.101] parse error at line 3, column 5:
// syntax error while parsing ..."; keep only the part after its own position, since the
// position is recomputed (and printed) here.
std::string parserReason(const std::string& what) {
  auto column = what.find("column ");
  auto colon = what.find(": ", column == std::string::npos ? 0 : column);
  if (colon == std::string::npos) return what;
  return what.substr(colon + 2);
}

std::string lineAt(std::string_view text, std::size_t offset) {
  if (offset > text.size()) offset = text.size();
  std::size_t begin = 0;
  if (offset > 0) {
    auto newline = text.rfind('\n', offset - 1);
    if (newline != std::string_view::npos) begin = newline + 1;
  }
  auto end = text.find('\n', begin);
  if (end == std::string_view::npos) end = text.size();
  std::string line(text.substr(begin, end - begin));
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return line;
}

// Spaces up to `column`, keeping the line's tabs so the caret lines up under the character.
std::string caretLine(const std::string& line, std::size_t column) {
  std::string out;
  for (std::size_t i = 0; i + 1 < column; ++i)
    out += (i < line.size() && line[i] == '\t') ? '\t' : ' ';
  return out + "^";
}

// Tracks the open objects while parsing so a repeated key can be reported with its path.
class DuplicateKeyCheck {
 public:
  explicit DuplicateKeyCheck(const std::string& source) : source_(source) {}

  bool operator()(int /*depth*/, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    switch (event) {
      case Event::object_start:
        frames_.push_back({true, {}, {}});
        break;
      case Event::array_start:
        frames_.push_back({false, {}, "[]"});
        break;
      case Event::object_end:
      case Event::array_end:
        frames_.pop_back();
        break;
      case Event::key: {
        auto& frame = frames_.back();
        std::string key = parsed.get<std::string>();
        if (!frame.keys.insert(key).second) {
          frame.lastKey = key;
          throw ConfigError(source_, path(),
                            "key given twice in one object (DeepSpeed rejects this too); keep one");
        }
        frame.lastKey = key;
        break;
      }
      case Event::value:
        break;
    }
    return true;
  }

 private:
  struct Frame {
    bool object;
    std::set<std::string> keys;
    std::string lastKey;
  };

  std::string path() const {
    std::string out;
    for (const auto& frame : frames_) {
      if (frame.lastKey.empty()) continue;
      if (!frame.object) {
        out += frame.lastKey;
        continue;
      }
      if (!out.empty()) out += '.';
      out += frame.lastKey;
    }
    return out;
  }

  const std::string& source_;
  std::vector<Frame> frames_;
};

}  // namespace

nlohmann::json parseJsonText(const std::string& text, const std::string& source) {
  try {
    return nlohmann::json::parse(text, DuplicateKeyCheck(source), /*allow_exceptions=*/true,
                                 /*ignore_comments=*/true);
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte counts the characters read, so the offending one is at e.byte - 1.
    std::size_t offset = e.byte > 0 ? e.byte - 1 : 0;
    TextPosition pos = textPosition(text, offset);
    std::string line = lineAt(text, offset);
    throw ConfigError(
        source, "",
        detail::cat("malformed JSON at line ", pos.line, ", column ", pos.column, ": ",
                    parserReason(e.what()), "\n    ", line, "\n    ", caretLine(line, pos.column)));
  } catch (const nlohmann::json::out_of_range& e) {
    // A number beyond a double ("1e309"): nlohmann reports the literal, not its position, so the
    // literal's first occurrence in the text is shown.
    const std::string what = e.what();
    const auto open = what.find("parsing '");
    const auto close = what.rfind('\'');
    std::string literal;
    if (open != std::string::npos && close != std::string::npos && close > open + 9)
      literal = what.substr(open + 9, close - open - 9);
    const std::size_t offset = literal.empty() ? std::string::npos : text.find(literal);
    if (offset == std::string::npos)
      throw ConfigError(source, "", detail::cat("malformed JSON: number '", literal, "' is out of range"));
    const TextPosition pos = textPosition(text, offset);
    const std::string line = lineAt(text, offset);
    throw ConfigError(source, "",
                      detail::cat("malformed JSON at line ", pos.line, ", column ", pos.column, ": number ",
                                  literal, " is beyond the range of a double\n    ", line, "\n    ",
                                  caretLine(line, pos.column)));
  }
}

}  // namespace zrt
