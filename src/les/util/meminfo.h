// What the kernel says about memory: available bytes and whether transparent huge pages can be
// had. Linux (/proc, /sys); elsewhere the answers are "unknown".
#pragma once

#include <cstdint>
#include <string>

namespace les {

// MemAvailable of /proc/meminfo in bytes (free memory plus what the kernel can reclaim without
// swapping: the page cache among it); 0 when it cannot be read.
uint64_t mem_available_bytes();

// What this process's memory cgroup can still take: limit - usage + its inactive page cache
// (reclaimable), the smallest over the cgroup and its ancestors that have a limit. Reads cgroup v2
// (memory.max, memory.current, memory.stat inactive_file) or, without it, v1's memory controller
// (memory.limit_in_bytes, memory.usage_in_bytes, memory.stat total_inactive_file). UINT64_MAX when
// no limit applies or nothing can be read (a container's memory limit is invisible to MemAvailable).
uint64_t cgroup_memory_headroom_bytes();
// The same from the text of /proc/self/cgroup and the root of the cgroup file systems (tests).
uint64_t cgroup_memory_headroom_bytes(const std::string& proc_self_cgroup, const std::string& cgroup_root);

// min(mem_available_bytes(), cgroup_memory_headroom_bytes()): what a new allocation can count on.
uint64_t memory_available_to_process();

// Whether a madvise(MADV_HUGEPAGE) region can get transparent huge pages: the mode in
// /sys/kernel/mm/transparent_hugepage/enabled is "always" or "madvise". False when the file is
// missing (no THP in the kernel) or says "never".
bool transparent_huge_pages_usable();

// The selected mode of a sysfs choice line such as "always [madvise] never" ("madvise"); empty
// when no mode is bracketed.
std::string sysfs_selected_mode(const std::string& line);

}  // namespace les
