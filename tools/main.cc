// seedstore: lazy, sharding-invariant weights with layout-independent fingerprints.
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "io/atomic_file.h"
#include "tools/cli.h"
#include "tools/output.h"

namespace {

// A standard descriptor closed by the caller (`seedstore inspect X >&-`) would be the next
// file opened -- an output store, which printf would then write into. Each closed one is
// taken by /dev/null opened read-only, so that writes to it fail (EBADF) and are reported.
void KeepStandardDescriptorsTaken() {
  for (int fd = 0; fd <= 2; ++fd)
    if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF) ::open("/dev/null", O_RDONLY);  // takes fd
}

// A command that succeeded, or printed its help, but whose output did not reach standard
// output (a full disk, /dev/full, a closed descriptor) fails: exit 5 (IO_ERROR), named.
int CheckedExit(int rc) {
  if (rc != 0) return rc;  // failed already, and said why
  const seedstore::Status out = seedstore::cli::FlushOutput(stdout, "");
  return out.ok() ? 0 : seedstore::cli::Fail(out);
}

}  // namespace

// A distributed save of N ranks keeps up to N rank files open while it is read (one
// descriptor each); the usual soft limit of 1024 would end a 1,000-rank save's export. The soft
// limit is raised to the hard one, as many servers and runtimes do at start.
static void RaiseOpenFileLimit() {
  struct rlimit l;
  if (::getrlimit(RLIMIT_NOFILE, &l) == 0 && l.rlim_cur < l.rlim_max) {
    l.rlim_cur = l.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &l);
  }
}

int main(int argc, char** argv) {
  using namespace seedstore::cli;
  KeepStandardDescriptorsTaken();
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress lines appear as they happen
  RaiseOpenFileLimit();
  seedstore::InstallSignalCleanup();  // Ctrl-C or SIGTERM mid-write leaves no temporary or lock
  CLI::App app{
      "seedstore: lazy, sharding-invariant model weights with layout-independent "
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
    return rc == 0 ? CheckedExit(0) : 2;  // usage errors: exit code 2 (INVALID_ARGUMENT)
  }
  for (auto& [sub, run] : runs) {
    if (sub->parsed()) {
      g_command = std::string("seedstore ") + sub->get_name();
      try {
        return RecordTestExit(CheckedExit(run()));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: error: INTERNAL: %s\n", g_command.c_str(), e.what());
        return 8;
      }
    }
  }
  return 2;
}
