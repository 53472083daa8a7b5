#pragma once
// Cluster description files (docs/cluster-format.md):
// {"kiwi_cluster_version": 1, "name": "my-cluster", "num_nodes": 2, "devices_per_node": 8,
//  "device": {"name": "A100-80GB", "memory": "80GiB", "memory_bandwidth_gbps": 2039,
//             "peak_tflops": {"f32": 19.5, "bf16": 312, "f16": 312}},
//  "intra_node": {"name": "nvlink3", "bandwidth_gbps": 300, "latency_us": 5},
//  "inter_node": {"name": "ib-100g", "bandwidth_gbps": 12.5, "latency_us": 10}}
// (gbps = 10^9 bytes per second, per device, one direction.)
#include <string>
#include <string_view>

#include "kiwi/cost/cluster.h"
#include "kiwi/cost/profile.h"
#include "kiwi/util/result.h"

namespace kiwi::io {

Result<cost::Cluster> ReadClusterFile(const std::string& path);
Result<cost::Cluster> ParseClusterJson(std::string_view text, const std::string& source);
// A preset name, or else a path to a cluster JSON file. A name that is neither is refused as given by
// `where`: the flag or the file field that named it ("--cluster", "plan.json: cluster").
Result<cost::Cluster> LoadCluster(const std::string& name_or_path, const std::string& where = "--cluster");

// Profiles (cost/profile.h): {"kiwi_profile_version": 1, "unit": "ms", "ops": {...}, "device": {...},
// "collectives": [...]}: measured per-op times and a device profile (`kiwi profile` writes one).
Result<cost::Profile> ReadProfileFile(const std::string& path);
Result<cost::Profile> ParseProfileJson(std::string_view text, const std::string& source);

}  // namespace kiwi::io
