// ReadFile implementations: a file descriptor (O_DIRECT or buffered) and bytes in memory.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "les/storage/io.h"
#include "les/util/error.h"

namespace les::storage {

namespace {

class FdFile final : public ReadFile {
 public:
  FdFile(int fd, std::string path, uint64_t size, bool direct, bool refused)
      : fd_(fd), path_(std::move(path)), size_(size), direct_(direct), refused_(refused) {}
  ~FdFile() override { ::close(fd_); }
  FdFile(const FdFile&) = delete;
  FdFile& operator=(const FdFile&) = delete;

  const std::string& path() const override { return path_; }
  uint64_t size() const override { return size_; }
  size_t alignment() const override { return direct_ ? kDirectIoAlign : 1; }
  bool direct() const override { return direct_; }
  bool direct_refused() const override { return refused_; }
  int fd() const override { return fd_; }

  int64_t read_at(void* dst, size_t n, uint64_t offset) const override {
    const ssize_t r = ::pread(fd_, dst, n, static_cast<off_t>(offset));
    return r < 0 ? -static_cast<int64_t>(errno) : static_cast<int64_t>(r);
  }

  void drop_cache(uint64_t offset, uint64_t n) const override {
    if (!direct_) (void)posix_fadvise(fd_, static_cast<off_t>(offset), static_cast<off_t>(n), POSIX_FADV_DONTNEED);
  }

 private:
  const int fd_;
  const std::string path_;
  const uint64_t size_;
  const bool direct_;
  const bool refused_;
};

class MemoryFile final : public ReadFile {
 public:
  MemoryFile(std::vector<uint8_t> bytes, std::string name, size_t alignment)
      : bytes_(std::move(bytes)), name_(std::move(name)), alignment_(alignment) {}

  const std::string& path() const override { return name_; }
  uint64_t size() const override { return bytes_.size(); }
  size_t alignment() const override { return alignment_; }
  bool direct() const override { return false; }

  int64_t read_at(void* dst, size_t n, uint64_t offset) const override {
    if (offset >= bytes_.size()) return 0;
    const size_t k = std::min<uint64_t>(n, bytes_.size() - offset);
    std::memcpy(dst, bytes_.data() + offset, k);
    return static_cast<int64_t>(k);
  }

 private:
  const std::vector<uint8_t> bytes_;
  const std::string name_;
  const size_t alignment_;
};

int open_or_throw(const std::string& path, int flags, bool allow_einval) {
  const int fd = ::open(path.c_str(), flags | O_RDONLY | O_CLOEXEC);
  if (fd < 0 && !(allow_einval && errno == EINVAL)) {
    throw Error(strfmt("%s: cannot open: %s", path.c_str(), std::strerror(errno)));
  }
  return fd;
}

uint64_t size_or_throw(int fd, const std::string& path) {
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw Error(strfmt("%s: cannot stat: %s", path.c_str(), std::strerror(e)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(strfmt("%s: not a regular file", path.c_str()));
  }
  return static_cast<uint64_t>(st.st_size);
}

// Some filesystems accept O_DIRECT at open() and refuse the reads (EINVAL): probe one block.
bool direct_reads_work(int fd, uint64_t size) {
  if (size == 0) return true;
  AlignedBuffer probe(kDirectIoAlign);
  for (;;) {
    const ssize_t r = ::pread(fd, probe.data(), kDirectIoAlign, 0);
    if (r >= 0) return true;
    if (errno != EINTR && errno != EAGAIN) return errno != EINVAL;
  }
}

}  // namespace

std::shared_ptr<ReadFile> open_buffered(const std::string& path) {
  const int fd = open_or_throw(path, 0, false);
  const uint64_t size = size_or_throw(fd, path);
  return std::make_shared<FdFile>(fd, path, size, false, false);
}

std::shared_ptr<ReadFile> open_direct(const std::string& path) {
  int fd = open_or_throw(path, O_DIRECT, true);
  if (fd >= 0) {
    const uint64_t size = size_or_throw(fd, path);
    if (direct_reads_work(fd, size)) return std::make_shared<FdFile>(fd, path, size, true, false);
    ::close(fd);
  }
  fd = open_or_throw(path, 0, false);
  const uint64_t size = size_or_throw(fd, path);
  return std::make_shared<FdFile>(fd, path, size, false, true);
}

std::shared_ptr<ReadFile> make_memory_file(std::vector<uint8_t> bytes, std::string name, size_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    throw Error(strfmt("%s: alignment %zu is not a power of two", name.c_str(), alignment));
  }
  return std::make_shared<MemoryFile>(std::move(bytes), std::move(name), alignment);
}

}  // namespace les::storage
