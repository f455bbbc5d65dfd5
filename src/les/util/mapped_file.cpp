#include "les/util/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "les/util/error.h"

namespace les {

MappedFile::~MappedFile() {
  if (data_) munmap(data_, size_);
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    if (data_) munmap(data_, size_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

void MappedFile::prefetch(size_t offset, size_t n) const {
  if (!data_ || offset >= size_ || n == 0) return;
  n = std::min(n, size_ - offset);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t start = offset / page * page;
  (void)madvise(data_ + start, n + (offset - start), MADV_WILLNEED);
}

MappedFile MappedFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(strfmt("%s: cannot open: %s", path.c_str(), std::strerror(errno)));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw Error(strfmt("%s: cannot stat: %s", path.c_str(), std::strerror(e)));
  }
  MappedFile m;
  m.size_ = static_cast<size_t>(st.st_size);
  if (m.size_ > 0) {
    void* p = mmap(nullptr, m.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      throw Error(strfmt("%s: cannot map %zu bytes: %s", path.c_str(), m.size_, std::strerror(e)));
    }
    m.data_ = static_cast<uint8_t*>(p);
  }
  ::close(fd);
  return m;
}

}  // namespace les
