// The SVG chart, parsed by expat: well-formed XML, one stacked segment per part per rung that
// ran, every memory width proportional to its bytes on one scale (the predicted tick and the
// budget line too), step-time widths proportional to seconds, and text escaped.
#include <doctest/doctest.h>
#include <expat.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "tools/ladder/svg_chart.h"

using namespace zrt;
using namespace zrt::ladder;

namespace {

struct Element {
  std::string name;
  std::map<std::string, std::string> attrs;
  std::string text;  // character data directly inside (for <text>)
};

struct Parsed {
  std::vector<Element> elements;
  std::vector<std::size_t> open;  // indices of elements being read
};

void XMLCALL onStart(void* data, const XML_Char* name, const XML_Char** attrs) {
  auto* p = static_cast<Parsed*>(data);
  Element e;
  e.name = name;
  for (int i = 0; attrs[i]; i += 2) e.attrs[attrs[i]] = attrs[i + 1];
  p->open.push_back(p->elements.size());
  p->elements.push_back(std::move(e));
}

void XMLCALL onEnd(void* data, const XML_Char*) { static_cast<Parsed*>(data)->open.pop_back(); }

void XMLCALL onText(void* data, const XML_Char* s, int len) {
  auto* p = static_cast<Parsed*>(data);
  if (!p->open.empty()) p->elements[p->open.back()].text.append(s, static_cast<std::size_t>(len));
}

Parsed parse(const std::string& svg) {
  Parsed p;
  XML_Parser parser = XML_ParserCreate(nullptr);
  XML_SetUserData(parser, &p);
  XML_SetElementHandler(parser, onStart, onEnd);
  XML_SetCharacterDataHandler(parser, onText);
  const XML_Status st = XML_Parse(parser, svg.data(), static_cast<int>(svg.size()), XML_TRUE);
  const std::string error = st == XML_STATUS_OK ? "" : XML_ErrorString(XML_GetErrorCode(parser));
  const auto line = XML_GetCurrentLineNumber(parser);
  XML_ParserFree(parser);
  INFO("expat: ", error, " at line ", line);
  REQUIRE(st == XML_STATUS_OK);
  return p;
}

double num(const Element& e, const std::string& a) {
  const auto it = e.attrs.find(a);
  REQUIRE_MESSAGE(it != e.attrs.end(), "no attribute ", a, " on <", e.name, ">");
  return std::stod(it->second);
}

std::vector<const Element*> withClass(const Parsed& p, const std::string& cls) {
  std::vector<const Element*> out;
  for (const Element& e : p.elements) {
    const auto it = e.attrs.find("class");
    if (it != e.attrs.end() && it->second == cls) out.push_back(&e);
  }
  return out;
}

std::vector<ChartBar> chartExample() {
  std::vector<ChartBar> bars(3);
  bars[0].label = "baseline (z0, 4 x 2)";
  bars[0].ran = true;
  bars[0].parts = {3'337'216, 3'337'216, 6'674'432, 11'816'960, 793'088};
  bars[0].predicted = 31'824'000;
  bars[0].stepSeconds = 0.301;
  bars[1].label = "+ ZeRO 3 <stage 3> & \"more\"";
  bars[1].ran = true;
  bars[1].parts = {1'668'608, 1'668'608, 3'337'216, 1'372'160, 4'130'000};
  bars[1].predicted = 17'600'000;
  bars[1].stepSeconds = 0.0421;
  bars[2].label = "+ LoRA";
  bars[2].ran = false;
  bars[2].note = "not available (zrt-train has no --lora-rank)";
  bars[2].predicted = 7'000'000;
  return bars;
}

}  // namespace

TEST_CASE("the chart is well-formed XML with a stacked bar per rung that ran") {
  const std::vector<ChartBar> bars = chartExample();
  const Parsed p = parse(ladderSvg(bars, 12u << 20, "ladder <title> & co"));
  REQUIRE(!p.elements.empty());
  CHECK(p.elements[0].name == "svg");
  const auto parts = withClass(p, "part");
  REQUIRE(parts.size() == 2 * kNumChartParts);  // the third rung did not run
  for (const Element* e : parts) CHECK(e->name == "rect");
  // Stacked: each rung's segments start where the one before ends.
  for (int rung = 0; rung < 2; ++rung) {
    double x = -1;
    for (const Element* e : parts) {
      if (num(*e, "data-rung") != rung) continue;
      if (x >= 0) CHECK(num(*e, "x") == doctest::Approx(x).epsilon(1e-6));
      x = num(*e, "x") + num(*e, "width");
    }
  }
  // Text escaped and read back as written.
  bool label = false, title = false, note = false;
  for (const Element& e : p.elements) {
    if (e.text == "+ ZeRO 3 <stage 3> & \"more\"") label = true;
    if (e.text == "ladder <title> & co") title = true;
    if (e.text == "not available (zrt-train has no --lora-rank)") note = true;
  }
  CHECK(label);
  CHECK(title);
  CHECK(note);
}

TEST_CASE("bar widths are proportional to bytes and seconds, one scale per panel") {
  const std::vector<ChartBar> bars = chartExample();
  const std::uint64_t budget = 12u << 20;
  const Parsed p = parse(ladderSvg(bars, budget, "t"));
  // Pixels per byte from the largest segment; every other segment, the predicted ticks and the
  // budget line on the same scale (positions printed to 1/1000 px).
  const auto parts = withClass(p, "part");
  double scale = 0, x0 = 0;
  for (const Element* e : parts)
    if (num(*e, "data-bytes") == 11'816'960) scale = num(*e, "width") / 11'816'960;
  REQUIRE(scale > 0);
  for (const Element* e : parts) {
    CAPTURE(e->attrs.at("data-part"));
    const double bytes = num(*e, "data-bytes");
    CHECK(std::abs(num(*e, "width") - bytes * scale) <= 1e-3);
    if (e->attrs.at("data-part") == "parameters") x0 = num(*e, "x");
  }
  // The stacked total of rung 0 is the sum of its parts.
  double end0 = 0;
  std::uint64_t sum0 = 0;
  for (const Element* e : parts)
    if (num(*e, "data-rung") == 0) {
      end0 = num(*e, "x") + num(*e, "width");
      sum0 += static_cast<std::uint64_t>(num(*e, "data-bytes"));
    }
  CHECK(std::abs(end0 - x0 - static_cast<double>(sum0) * scale) <= 5e-3);
  const auto predicted = withClass(p, "predicted");
  REQUIRE(predicted.size() == 2);
  for (const Element* e : predicted)
    CHECK(std::abs(num(*e, "x1") - x0 - num(*e, "data-bytes") * scale) <= 1e-3);
  const auto budgetLine = withClass(p, "budget");
  REQUIRE(budgetLine.size() == 1);
  CHECK(num(*budgetLine[0], "data-bytes") == budget);
  CHECK(std::abs(num(*budgetLine[0], "x1") - x0 - static_cast<double>(budget) * scale) <= 1e-3);
  // Step time: 0.301 s against 0.0421 s, widths in the same ratio.
  const auto steps = withClass(p, "step");
  REQUIRE(steps.size() == 2);
  const double s0 = num(*steps[0], "data-seconds"), s1 = num(*steps[1], "data-seconds");
  CHECK(s0 == doctest::Approx(0.301));
  CHECK(s1 == doctest::Approx(0.0421));
  CHECK(num(*steps[0], "width") / num(*steps[1], "width") == doctest::Approx(s0 / s1).epsilon(1e-4));
  // Every bar fits inside the drawing.
  const double width = num(p.elements[0], "width");
  for (const Element* e : parts) CHECK(num(*e, "x") + num(*e, "width") <= width);
  for (const Element* e : steps) CHECK(num(*e, "x") + num(*e, "width") <= width);
}

TEST_CASE("a ladder where nothing ran still draws axes and the budget") {
  std::vector<ChartBar> bars(1);
  bars[0].label = "baseline";
  bars[0].note = "failed";
  const Parsed p = parse(ladderSvg(bars, 1u << 20, "t"));
  CHECK(withClass(p, "part").empty());
  CHECK(withClass(p, "budget").size() == 1);
  const Parsed empty = parse(ladderSvg({}, 0, "t"));
  CHECK(withClass(empty, "budget").size() == 1);
}
