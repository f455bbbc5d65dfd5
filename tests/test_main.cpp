// The test program's main: GoogleTest plus a listener that appends every skipped test to the file
// named by $LES_SKIP_LOG, one line per skip: "<category>\t<reason>\t<Suite.Test>". The category
// is the tag of the LES_SKIP_* macros in test_util.h (cpu, platform, optional) or "untagged";
// scripts/skip_report.sh groups the lines and fails the test command on an untagged skip.
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

namespace {

// "[cpu] no AVX2" -> {"cpu", "no AVX2"}; a message without a known tag -> {"untagged", message}.
std::pair<std::string, std::string> split_tag(std::string msg) {
  while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
  for (const char* tag : {"cpu", "platform", "optional"}) {
    const std::string t = std::string("[") + tag + "] ";
    if (msg.compare(0, t.size(), t) == 0) return {tag, msg.substr(t.size())};
  }
  return {"untagged", msg};
}

class SkipLog : public ::testing::EmptyTestEventListener {
 public:
  explicit SkipLog(std::string path) : path_(std::move(path)) {}

  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.skipped()) reason_ = r.message();
  }

  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (!info.result()->Skipped()) return;
    auto [category, reason] = split_tag(reason_);
    for (char& ch : reason) {
      if (ch == '\t' || ch == '\n') ch = ' ';
    }
    const std::string line = category + "\t" + reason + "\t" + info.test_suite_name() + "." + info.name() + "\n";
    // One write with O_APPEND: lines from the tests ctest runs in parallel do not interleave.
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      (void)!::write(fd, line.data(), line.size());
      ::close(fd);
    }
    reason_.clear();
  }

 private:
  std::string path_;
  std::string reason_;
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (const char* log = std::getenv("LES_SKIP_LOG"); log && *log) {
    ::testing::UnitTest::GetInstance()->listeners().Append(new SkipLog(log));
  }
  return RUN_ALL_TESTS();
}
