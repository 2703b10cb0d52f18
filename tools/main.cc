// seedstore: lazy, sharding-invariant weights with layout-independent fingerprints.
#include <cstdio>

#include "io/atomic_file.h"
#include "tools/cli.h"

int main(int argc, char** argv) {
  using namespace seedstore::cli;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress lines appear as they happen
  seedstore::InstallSignalCleanup();  // Ctrl-C or SIGTERM mid-write leaves no temporary or lock
  CLI::App app{"seedstore: lazy, sharding-invariant model weights with layout-independent "
               "fingerprints"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "seedstore 0.1.0");
  std::vector<std::pair<CLI::App*, std::function<int()>>> runs;
  for (auto& c : Registry()) {
    CLI::App* sub = app.add_subcommand(c.name, c.help);
    runs.emplace_back(sub, c.setup(*sub));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;  // usage errors: exit code 2 (INVALID_ARGUMENT)
  }
  for (auto& [sub, run] : runs) {
    if (sub->parsed()) {
      g_command = std::string("seedstore ") + sub->get_name();
      try {
        return run();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: error: INTERNAL: %s\n", g_command.c_str(), e.what());
        return 8;
      }
    }
  }
  return 2;
}
