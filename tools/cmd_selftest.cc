// seedstore selftest: run the known-answer vectors inside the shipped binary.
#include <cstdio>

#include "gen/materialize_cpu.h"
#include "store/selftest.h"
#include "tools/cli.h"

namespace seedstore::cli {
namespace {

int Run() {
  int failed = 0, passed = 0;
  for (const auto& c : RunSelfTest()) {
    std::printf("%s  %s%s%s\n", c.passed ? "PASS" : "FAIL", c.name.c_str(), c.passed ? "" : ": ",
                c.passed ? "" : c.detail.c_str());
    (c.passed ? passed : failed)++;
  }
  std::printf("cpu path: %s\n%d passed, %d failed\n", CpuIsaName(), passed, failed);
  return failed ? 1 + static_cast<int>(Code::kMismatch) : 0;
}

Register reg({"selftest", "Run the known-answer vectors (Random123, JAX, XXH3)",
              [](CLI::App&) { return [] { return Run(); }; }});

}  // namespace
}  // namespace seedstore::cli
