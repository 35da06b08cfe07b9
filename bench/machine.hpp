// shmbus-bench — the machine a run is measured on: the CPU and its caches,
// the kernel, the CPUs the roles run on and whether any two of them are SMT
// siblings of one core (read from /proc/cpuinfo and sysfs). Every figure the
// benchmark prints travels with this.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common.hpp"

namespace bench {

// Whether the TSC ticks at a constant rate through sleep states
// (constant_tsc and nonstop_tsc in /proc/cpuinfo): only then is it a clock.
bool invariant_tsc();

// The kernel's CPU list format ("0-3,8,10-11") into CPU numbers, in order;
// throws on anything else.
std::vector<int> parse_cpu_list(const std::string& text);
// The reverse, without ranges: "0,1,2".
std::string join(const std::vector<int>& v);

// The CPUs this process may run on.
std::vector<int> allowed_cpus();
// Of those, the first of each physical core (sysfs thread_siblings_list;
// every CPU its own core where sysfs does not say).
std::vector<int> one_cpu_per_core();

// Where a role runs under --cpus: the producer (pinger) on the first CPU, the
// consumers round-robin over the rest, everyone on the first if it is alone.
int cpu_for(const RunConfig& cfg, Role role, int id);

// The CPU model, CPU count, kernel, whether it is a virtual machine, the date
// and the load average.
nlohmann::json machine_info();

// Where the roles run (`cpus` from --cpus, or unpinned on the CPUs allowed
// here), whether those CPUs are SMT siblings, and the caches of the first.
nlohmann::json placement_info(const std::vector<int>& cpus);

// placement_info()'s caches in one line: "L1d 32K, L1i 32K, L2 512K (CPUs 0)".
std::string caches_text(const nlohmann::json& caches);

}  // namespace bench
