// Read-only memory map of a whole file (for fully resident models).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace les {

class MappedFile {
 public:
  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // Maps path; throws les::Error naming the path and errno text.
  static MappedFile open(const std::string& path);

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

  // Asks the kernel to start reading [offset, offset + n) in the background (madvise WILLNEED),
  // so that a sequential reader finds it in memory. Advisory: clipped to the file, errors ignored.
  void prefetch(size_t offset, size_t n) const;

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace les
