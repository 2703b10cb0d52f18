// Stale temporaries of atomic writes (io/atomic_file.h): the next atomic write to a
// target removes that target's temporaries whose writer process is gone on this host, and
// nothing else -- not a live writer's, not this process's, not another host's or target's,
// not a name that merely looks similar, not a directory or a symlink. Commit over an existing
// file, large (freed on a thread of its own) or small, or over a symlink.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

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
  const std::string not_numeric =
      Touch(target + ".tmp-" + tag + "-" + std::to_string(dead_) + "-x");
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
  for (const std::string& keep :
       {live, mine, other_target, other_host, legacy, suffixed, not_numeric, a_dir, victim, target})
    EXPECT_TRUE(fs::exists(keep)) << keep;
  EXPECT_TRUE(fs::is_symlink(a_link));
  ASSERT_TRUE(f->Append("new", 3).ok());
  ASSERT_TRUE(f->Commit().ok());
  std::ifstream in(target);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "new");
  std::ifstream v(victim);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(v), {}), "must survive");
}

// A file name near NAME_MAX (255 bytes) still gets a temporary: "<name>.tmp-..." would be too
// long (names over about 200 bytes would fail with "File name too long"), so the name's part
// is cut and ends in "~" and the hash of the whole name. Names that differ only past the cut get
// different temporaries, and the stale ones of a long name are found and removed as any other's.
// A writer lock is held while a live process holds its OFD lock -- whatever process, this
// one's other descriptors included -- and released however its holder ends (here: a child
// killed with SIGKILL while holding it); the file left then blocks nobody.
TEST_F(AtomicTemps, WriterLockIsHeldExactlyWhileItsHolderLives) {
  const std::string save = dir_ + "/p.h5", lock = save + ".lock";
  std::string holder;
  EXPECT_FALSE(WriterLockHeld(lock, &holder));  // no file
  EXPECT_TRUE(CheckNoOtherWriter(save).ok());
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t writer = fork();
  if (writer == 0) {
    const int fd = ::open(lock.c_str(), O_CREAT | O_RDWR, 0644);
    struct flock fl = {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    if (fd < 0 || ::fcntl(fd, F_OFD_SETLK, &fl) != 0 ||
        ::write(fd, "pid 77 on elsewhere\n", 20) != 20)
      _exit(1);
    if (::write(ready[1], "x", 1) != 1) _exit(1);
    for (;;) pause();
  }
  ASSERT_GT(writer, 0);
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  EXPECT_TRUE(WriterLockHeld(lock, &holder));
  EXPECT_EQ(holder, "pid 77 on elsewhere");
  const Status refused = CheckNoOtherWriter(save);
  EXPECT_EQ(refused.code(), Code::kIo);
  EXPECT_NE(refused.message().find("writer-locked: '" + save + "'"), std::string::npos)
      << refused.message();
  EXPECT_NE(refused.message().find("pid 77 on elsewhere"), std::string::npos) << refused.message();
  ::kill(writer, SIGKILL);
  ASSERT_EQ(waitpid(writer, nullptr, 0), writer);
  EXPECT_TRUE(fs::exists(lock));
  EXPECT_FALSE(WriterLockHeld(lock, &holder));
  EXPECT_EQ(holder, "pid 77 on elsewhere");  // what it records, for the next writer's note
  EXPECT_TRUE(CheckNoOtherWriter(save).ok());
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST_F(AtomicTemps, LongFileNamesGetTemporariesThatFit) {
  for (const size_t len : {1u, 150u, 200u, 254u, 255u}) {
    const std::string name(len, 'n');
    const std::string target = dir_ + "/" + name;
    const std::string temp = AtomicFile::TempName(target, 2147483647, 4294967295u);
    ASSERT_EQ(temp.rfind(dir_ + "/", 0), 0u) << temp;
    EXPECT_LE(temp.size() - dir_.size() - 1, 255u) << len;
    if (temp.size() - dir_.size() - 1 < 255u - 30) {
      EXPECT_EQ(temp.rfind(target + ".tmp-", 0), 0u) << temp;  // short names: unchanged form
    }
    auto f = AtomicFile::Create(target);
    ASSERT_TRUE(f.ok()) << len << ": " << f.status().ToString();
    ASSERT_TRUE(f->Append("x", 1).ok());
    ASSERT_TRUE(f->Commit().ok()) << len;
    EXPECT_TRUE(fs::is_regular_file(target)) << len;
  }
  const std::string a = dir_ + "/" + std::string(250, 'a'),
                    b = dir_ + "/" + std::string(249, 'a') + "b";
  const std::string ta = AtomicFile::TempName(a, dead_, 0), tb = AtomicFile::TempName(b, dead_, 0);
  EXPECT_NE(ta, tb);
  EXPECT_NE(ta.find('~'), std::string::npos) << ta;
  Touch(ta);
  Touch(tb);
  EXPECT_EQ(AtomicFile::RemoveStaleTemporaries(a), 1);
  EXPECT_FALSE(fs::exists(ta));
  EXPECT_TRUE(fs::exists(tb));
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

int OpenDescriptors() {
  int k = 0;
  for (auto it = fs::directory_iterator("/proc/self/fd"); it != fs::directory_iterator(); ++it) ++k;
  return k;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Replacing a file: the new bytes are at the path when Commit returns; a reader that holds the
// old file keeps reading it intact; the old file is released -- large ones (64 MiB or more) on
// a thread of Commit's own, which this test waits for by counting descriptors -- and a
// symlink at the path is replaced itself, its target left as it was.
TEST_F(AtomicTemps, CommitReplacesFilesAndReleasesTheOldOnes) {
  const std::string target = dir_ + "/m.h5";
  const int before = OpenDescriptors();
  for (const off_t size : {off_t{10}, off_t{64} << 20, (off_t{64} << 20) + 4097}) {
    SCOPED_TRACE("old file of " + std::to_string(size) + " bytes");
    Touch(target, "old-" + std::to_string(size));
    ASSERT_EQ(::truncate(target.c_str(), size), 0);  // sparse: large without writing it
    const int reader = ::open(target.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(reader, 0);
    auto f = AtomicFile::Create(target);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    const std::string text = "new-" + std::to_string(size);
    ASSERT_TRUE(f->Append(text.data(), text.size()).ok());
    ASSERT_TRUE(f->Commit().ok());
    EXPECT_EQ(Slurp(target), text);
    char buf[32] = {};
    const std::string old = "old-" + std::to_string(size);
    ASSERT_EQ(::pread(reader, buf, old.size(), 0), static_cast<ssize_t>(old.size()));
    EXPECT_EQ(std::string(buf, old.size()), old);
    struct stat st;
    ASSERT_EQ(::fstat(reader, &st), 0);
    EXPECT_EQ(st.st_size, size);
    EXPECT_EQ(st.st_nlink, 0u);  // unlinked, kept alive only by this reader
    ::close(reader);
  }
  // A symlink at the path: its target (a large file) is replaced and released like any
  // other; the link stays (WritesThroughSymbolicLinksReplaceWhatTheyPointTo).
  const std::string real = dir_ + "/real.h5", link = dir_ + "/link.h5";
  Touch(real, "target");
  ASSERT_EQ(::truncate(real.c_str(), off_t{64} << 20), 0);
  fs::create_symlink(real, link);
  {
    auto f = AtomicFile::Create(link);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(f->Append("via link", 8).ok());
    ASSERT_TRUE(f->Commit().ok());
  }
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(Slurp(link), "via link");
  EXPECT_EQ(Slurp(real), "via link");
  // Every replaced file is released: no descriptor stays open.
  int now = OpenDescriptors();
  for (int i = 0; i < 500 && now != before; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    now = OpenDescriptors();
  }
  EXPECT_EQ(now, before);
}

// CommitAll of many files in two folders, synced and not, some replacing files a reader
// holds: every file is in place with its bytes, no temporary is left, every replaced file is
// released. Create with remove_stale false leaves a dead writer's temporary alone (a
// distributed save's commit collects it instead); the next plain Create removes it.
TEST_F(AtomicTemps, CommitAllPlacesEveryFileAndReleasesTheReplacedOnes) {
  const std::string other = dir_ + "/sub";
  fs::create_directory(other);
  const int before = OpenDescriptors();
  std::vector<AtomicFile> files;
  std::vector<std::string> paths;
  std::vector<int> readers;
  for (int k = 0; k < 40; ++k) {
    const std::string p = (k % 2 ? other : dir_) + "/f" + std::to_string(k) + ".h5";
    if (k % 5 == 0) {
      Touch(p, "old");
      readers.push_back(::open(p.c_str(), O_RDONLY | O_CLOEXEC));
      ASSERT_GE(readers.back(), 0);
    }
    auto f = AtomicFile::Create(p, -1, /*remove_stale=*/k != 0);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    const std::string text = "bytes of " + std::to_string(k);
    ASSERT_TRUE(f->Append(text.data(), text.size()).ok());
    if (k % 3 == 0) ASSERT_TRUE(f->Sync().ok());
    files.push_back(std::move(*f));
    paths.push_back(p);
  }
  ASSERT_TRUE(AtomicFile::CommitAll(files).ok());
  for (int k = 0; k < 40; ++k) EXPECT_EQ(Slurp(paths[k]), "bytes of " + std::to_string(k));
  for (const std::string& d : {dir_, other})
    for (const auto& e : fs::directory_iterator(d))
      EXPECT_EQ(e.path().string().find(".tmp-"), std::string::npos) << e.path();
  for (int fd : readers) {
    char buf[4] = {};
    EXPECT_EQ(::pread(fd, buf, 3, 0), 3);
    EXPECT_EQ(std::string(buf), "old");  // the reader keeps the replaced file
    ::close(fd);
  }
  EXPECT_EQ(OpenDescriptors(), before);
  // remove_stale false leaves a stale temporary; a plain Create of that path removes it.
  const std::string target = dir_ + "/f0.h5";
  const std::string stale = Touch(AtomicFile::TempName(target, dead_, 0));
  {
    auto f = AtomicFile::Create(target, -1, false);
    ASSERT_TRUE(f.ok());
  }
  EXPECT_TRUE(fs::exists(stale));
  {
    auto f = AtomicFile::Create(target);
    ASSERT_TRUE(f.ok());
  }
  EXPECT_FALSE(fs::exists(stale));
}

// Writing through symbolic links replaces the file they lead to, in its folder; the links
// stay. A link to nowhere is created where it points; a loop is refused by name. A replaced
// file's permissions are kept.
TEST_F(AtomicTemps, WritesThroughSymbolicLinksReplaceWhatTheyPointTo) {
  fs::create_directories(dir_ + "/vol/ckpt");
  Touch(dir_ + "/vol/ckpt/model.h5", "old");
  fs::create_symlink("vol/ckpt/model.h5", dir_ + "/latest");  // relative
  fs::create_symlink(dir_ + "/latest", dir_ + "/current");    // absolute, to a link
  auto write = [](const std::string& path, const std::string& text) -> Status {
    SEEDSTORE_ASSIGN_OR_RETURN(AtomicFile f, AtomicFile::Create(path));
    SEEDSTORE_RETURN_IF_ERROR(f.Append(text.data(), text.size()));
    return f.Commit();
  };
  auto read = [](const std::string& p) {
    std::ifstream f(p);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  ASSERT_TRUE(write(dir_ + "/current", "new").ok());
  EXPECT_TRUE(fs::is_symlink(dir_ + "/current"));
  EXPECT_TRUE(fs::is_symlink(dir_ + "/latest"));
  EXPECT_EQ(read(dir_ + "/vol/ckpt/model.h5"), "new");
  {
    auto r = ResolveSymlinks(dir_ + "/current");
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, dir_ + "/vol/ckpt/model.h5");
    auto plain = ResolveSymlinks(dir_ + "/nothing-here");
    ASSERT_TRUE(plain.ok());
    EXPECT_EQ(*plain, dir_ + "/nothing-here");
  }
  // Temporaries were made next to the target, and none is left.
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_TRUE(e.path().filename() == "vol" || fs::is_symlink(e.path())) << e.path();
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_ + "/vol/ckpt"), fs::directory_iterator()), 1);
  // A dangling link: the file is created where it points.
  fs::create_symlink("vol/ckpt/next.h5", dir_ + "/next");
  ASSERT_TRUE(write(dir_ + "/next", "first").ok());
  EXPECT_TRUE(fs::is_symlink(dir_ + "/next"));
  EXPECT_EQ(read(dir_ + "/vol/ckpt/next.h5"), "first");
  // Replacing a file keeps its permissions: a private checkpoint stays private.
  ::chmod((dir_ + "/vol/ckpt/model.h5").c_str(), 0600);
  ASSERT_TRUE(write(dir_ + "/latest", "newer").ok());
  EXPECT_EQ(fs::status(dir_ + "/vol/ckpt/model.h5").permissions() & fs::perms::mask,
            fs::perms(0600));
  EXPECT_EQ(read(dir_ + "/vol/ckpt/model.h5"), "newer");
  ::chmod((dir_ + "/vol/ckpt/model.h5").c_str(), 0640);
  ASSERT_TRUE(write(dir_ + "/vol/ckpt/model.h5", "newest").ok());
  EXPECT_EQ(fs::status(dir_ + "/vol/ckpt/model.h5").permissions() & fs::perms::mask,
            fs::perms(0640));
  // A read-only checkpoint (0444) is replaced read-only, but its temporary stays writable by its
  // owner until Commit: HDF5 reopens it by name to write (read-only, it would refuse a non-root
  // owner).
  {
    const std::string ro = dir_ + "/vol/ckpt/model.h5";
    ::chmod(ro.c_str(), 0444);
    auto f = AtomicFile::Create(ro);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_EQ(fs::status(f->temp_path()).permissions() & fs::perms::mask, fs::perms(0644));
    ASSERT_TRUE(f->Append("read-only", 9).ok());
    ASSERT_TRUE(f->Commit().ok());
    EXPECT_EQ(fs::status(ro).permissions() & fs::perms::mask, fs::perms(0444));
    EXPECT_EQ(read(ro), "read-only");
  }
  // A loop.
  fs::create_symlink("b", dir_ + "/a");
  fs::create_symlink("a", dir_ + "/b");
  Status loop = write(dir_ + "/a", "x");
  EXPECT_EQ(loop.code(), Code::kInvalidArgument);
  EXPECT_NE(loop.message().find("'" + dir_ + "/a': more than 40 symbolic links"), std::string::npos)
      << loop.ToString();
}

// Only a regular file (or a new one) is replaced: a directory, a FIFO (or a device: renaming
// over /dev/full as root replaced the device node) is refused by name before anything is
// written, directly or through a link, and is left as it was.
TEST_F(AtomicTemps, RefusesToReplaceDirectoriesAndSpecialFiles) {
  const std::string folder = dir_ + "/folder", fifo = dir_ + "/fifo", link = dir_ + "/link";
  fs::create_directory(folder);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  fs::create_symlink("fifo", link);
  for (const auto& [path, needle] :
       {std::pair{folder, "'" + folder + "' is a directory"},
        std::pair{fifo, "'" + fifo + "' is not a regular file"},
        std::pair{link, "'" + link + "' (-> '" + fifo + "') is not a regular file"}}) {
    auto f = AtomicFile::Create(path);
    ASSERT_FALSE(f.ok()) << path;
    EXPECT_EQ(f.status().code(), Code::kInvalidArgument) << path;
    EXPECT_NE(f.status().message().find(needle), std::string::npos) << f.status().ToString();
  }
  EXPECT_TRUE(fs::is_directory(folder));
  EXPECT_TRUE(fs::is_fifo(fifo));
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()),
            3);  // no temporaries
}

}  // namespace
}  // namespace seedstore
