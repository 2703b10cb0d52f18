// Stale temporaries of atomic writes (io/atomic_file.h, issue 3): the next atomic write to a
// target removes that target's temporaries whose writer process is gone on this host, and
// nothing else -- not a live writer's, not this process's, not another host's or target's,
// not a name that merely looks similar, not a directory or a symlink.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "io/atomic_file.h"

namespace seedstore {
namespace {

namespace fs = std::filesystem;

class AtomicTemps : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/seedstore-atomic-XXXXXX";
    dir_ = mkdtemp(tmpl);
    // A pid that is certainly dead: a child that exited and was reaped.
    const pid_t c = fork();
    if (c == 0) _exit(0);
    ASSERT_GT(c, 0);
    ASSERT_EQ(waitpid(c, nullptr, 0), c);
    dead_ = c;
    // A live writer: a child that waits until the test ends it.
    live_ = fork();
    if (live_ == 0) {
      for (;;) pause();
    }
    ASSERT_GT(live_, 0);
    ASSERT_EQ(::kill(dead_, 0), -1);
    ASSERT_EQ(errno, ESRCH);
  }
  void TearDown() override {
    if (live_ > 0) {
      ::kill(live_, SIGKILL);
      waitpid(live_, nullptr, 0);
    }
    fs::remove_all(dir_);
  }
  std::string Touch(const std::string& path, const std::string& text = "partial") {
    std::ofstream(path) << text;
    return path;
  }
  std::string dir_;
  pid_t dead_ = -1, live_ = -1;
};

TEST_F(AtomicTemps, NextWriteRemovesOnlyStaleTemporariesOfItsTarget) {
  const std::string target = dir_ + "/ckpt.h5", other = dir_ + "/other.h5";
  const std::string stale0 = Touch(AtomicFile::TempName(target, dead_, 0));
  const std::string stale7 = Touch(AtomicFile::TempName(target, dead_, 7));
  const std::string live = Touch(AtomicFile::TempName(target, live_, 0));
  const std::string mine = Touch(AtomicFile::TempName(target, getpid(), 999999));
  const std::string other_target = Touch(AtomicFile::TempName(other, dead_, 0));
  // Another host's temporary: same shape, another host tag (its pid means nothing here).
  const std::string t = AtomicFile::TempName(target, dead_, 0);
  const std::string head = target + ".tmp-", tail = "-" + std::to_string(dead_) + "-0";
  ASSERT_EQ(t.substr(0, head.size()), head);
  const std::string tag = t.substr(head.size(), t.size() - head.size() - tail.size());
  ASSERT_EQ(head + tag + tail, t);
  const std::string other_host =
      Touch(target + ".tmp-" + tag + "x-" + std::to_string(dead_) + "-0");
  const std::string legacy = Touch(target + ".tmp-" + std::to_string(dead_) + "-0");
  const std::string suffixed = Touch(AtomicFile::TempName(target, dead_, 1) + ".keep");
  const std::string not_numeric = Touch(target + ".tmp-" + tag + "-" + std::to_string(dead_) + "-x");
  const std::string a_dir = AtomicFile::TempName(target, dead_, 2);
  fs::create_directory(a_dir);
  const std::string victim = Touch(dir_ + "/victim", "must survive");
  const std::string a_link = AtomicFile::TempName(target, dead_, 3);
  fs::create_symlink(victim, a_link);
  Touch(target, "previous");

  auto f = AtomicFile::Create(target);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_FALSE(fs::exists(stale0));
  EXPECT_FALSE(fs::exists(stale7));
  for (const std::string& keep : {live, mine, other_target, other_host, legacy, suffixed,
                                  not_numeric, a_dir, victim, target})
    EXPECT_TRUE(fs::exists(keep)) << keep;
  EXPECT_TRUE(fs::is_symlink(a_link));
  ASSERT_TRUE(f->Append("new", 3).ok());
  ASSERT_TRUE(f->Commit().ok());
  std::ifstream in(target);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "new");
  std::ifstream v(victim);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(v), {}), "must survive");
}

TEST_F(AtomicTemps, RemoveStaleTemporariesCountsAndIsIdempotent) {
  const std::string target = dir_ + "/m.h5";
  Touch(AtomicFile::TempName(target, dead_, 0));
  Touch(AtomicFile::TempName(target, dead_, 1));
  Touch(AtomicFile::TempName(target, live_, 0));
  EXPECT_EQ(AtomicFile::RemoveStaleTemporaries(target), 2);
  EXPECT_EQ(AtomicFile::RemoveStaleTemporaries(target), 0);
  EXPECT_TRUE(fs::exists(AtomicFile::TempName(target, live_, 0)));
  // Once its writer is gone, the live writer's temporary is stale too.
  ::kill(live_, SIGKILL);
  waitpid(live_, nullptr, 0);
  live_ = -1;
  EXPECT_EQ(AtomicFile::RemoveStaleTemporaries(target), 1);
  // A writer that exited but was not reaped yet (a zombie: a launcher's children are
  // reparented to init, which may reap them late) is gone too.
  const pid_t zombie = fork();
  if (zombie == 0) _exit(0);
  ASSERT_GT(zombie, 0);
  for (int i = 0; i < 1000 && !ProcessIsGone(zombie); ++i) usleep(1000);
  EXPECT_EQ(::kill(zombie, 0), 0);  // still there, as a zombie
  EXPECT_TRUE(ProcessIsGone(zombie));
  Touch(AtomicFile::TempName(target, zombie, 0));
  EXPECT_EQ(AtomicFile::RemoveStaleTemporaries(target), 1);
  waitpid(zombie, nullptr, 0);
  EXPECT_FALSE(ProcessIsGone(getpid()));
  EXPECT_FALSE(ProcessIsGone(0));
  // A target in a folder that does not exist: nothing to do, no error.
  EXPECT_EQ(AtomicFile::RemoveStaleTemporaries(dir_ + "/no/such/dir/x.h5"), 0);
  // A relative target (folder "."): only names of that target are considered.
  EXPECT_EQ(AtomicFile::RemoveStaleTemporaries("seedstore-no-such-target.h5"), 0);
}

}  // namespace
}  // namespace seedstore
