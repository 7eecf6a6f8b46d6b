// The cluster spec: which host:port each ps and worker task listens on, and
// its two JSON forms (PSTRAIN_CLUSTER and TensorFlow's TF_CONFIG).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pstrain {

enum class role { ps, worker };

std::string_view role_name(role r);

struct task_id {
    pstrain::role role;
    int index;
    bool operator==(const task_id& o) const { return role == o.role && index == o.index; }
};

struct cluster_spec {
    std::vector<std::string> ps;      // "host:port", ps task order
    std::vector<std::string> worker;  // "host:port", worker task order

    const std::vector<std::string>& tasks(role r) const { return r == role::ps ? ps : worker; }
};

// {"ps":[...],"worker":[...]}
std::string to_json(const cluster_spec& spec);
// {"cluster":{...},"task":{"type":"ps","index":0}}
std::string tf_config_json(const cluster_spec& spec, task_id task);

// Parses PSTRAIN_CLUSTER (or the "cluster" member of TF_CONFIG).  Checks
// that both lists are present, non-empty and hold "host:port" strings with a
// valid port.  Throws pstrain::error naming what is wrong.
cluster_spec parse_cluster_spec(std::string_view json, std::string_view what = "PSTRAIN_CLUSTER");

struct tf_config {
    cluster_spec cluster;
    task_id task;
};
tf_config parse_tf_config(std::string_view json);

// Splits "host:port" (checked by parse_cluster_spec).
std::pair<std::string, int> split_host_port(std::string_view address);

}  // namespace pstrain
