// What the kernel says about memory: available bytes and whether transparent huge pages can be
// had. Linux (/proc, /sys); elsewhere the answers are "unknown".
#pragma once

#include <cstdint>
#include <string>

namespace les {

// MemAvailable of /proc/meminfo in bytes (free memory plus what the kernel can reclaim without
// swapping: the page cache among it); 0 when it cannot be read.
uint64_t mem_available_bytes();

// Whether a madvise(MADV_HUGEPAGE) region can get transparent huge pages: the mode in
// /sys/kernel/mm/transparent_hugepage/enabled is "always" or "madvise". False when the file is
// missing (no THP in the kernel) or says "never".
bool transparent_huge_pages_usable();

// The selected mode of a sysfs choice line such as "always [madvise] never" ("madvise"); empty
// when no mode is bracketed.
std::string sysfs_selected_mode(const std::string& line);

}  // namespace les
