// zrt-plan: the memory bill of a training run before it starts, and which strategy to use.
// docs/plan.md walks through an example; runPlan() in cli.cpp holds the program.
#include <iostream>
#include <string>
#include <vector>

#include "core/error.h"
#include "tools/plan/cli.h"

int main(int argc, char** argv) {
  try {
    return zrt::plan::runPlan(std::vector<std::string>(argv + 1, argv + argc), std::cout, std::cerr);
  } catch (const std::exception& e) {
    std::cerr << "zrt-plan: " << e.what() << "\n";
    return 1;
  }
}
