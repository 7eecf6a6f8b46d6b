// The cluster spec: which host:port each chief, evaluator, ps and worker
// task listens on, and its two JSON forms (PSTRAIN_CLUSTER and TensorFlow's
// TF_CONFIG).  pstrain's own trainer has ps and worker tasks only (worker 0
// is its chief); a separate chief and an evaluator are for TensorFlow
// programs (ParameterServerStrategy's coordinator and side-car evaluator).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pstrain {

// In the order TensorFlow's SlurmClusterResolver gives jobs their ranks.
enum class role { chief, evaluator, ps, worker };

std::string_view role_name(role r);

struct task_id {
    pstrain::role role;
    int index;
    bool operator==(const task_id& o) const { return role == o.role && index == o.index; }
};

struct cluster_spec {
    std::vector<std::string> chief;      // "host:port": none, or one
    std::vector<std::string> evaluator;  // none, or one
    std::vector<std::string> ps;         // ps task order
    std::vector<std::string> worker;     // worker task order

    const std::vector<std::string>& tasks(role r) const;
    std::vector<std::string>& tasks(role r);
};

// {"chief":[...],"evaluator":[...],"ps":[...],"worker":[...]}, chief and
// evaluator only when there are.
std::string to_json(const cluster_spec& spec);
// TensorFlow's TF_CONFIG as its TFConfigClusterResolver reads it:
// {"cluster":{"chief":[...],"ps":[...],"worker":[...]},"task":{"type":"ps",
// "index":0},"rpc_layer":"grpc","environment":"cloud"}.  The evaluator is
// never in "cluster" (ParameterServerStrategy refuses a cluster with one);
// its own task says type "evaluator".
std::string tf_config_json(const cluster_spec& spec, task_id task);

// Parses PSTRAIN_CLUSTER (or the "cluster" member of TF_CONFIG).  Checks
// that the ps and worker lists are present, non-empty and hold "host:port"
// strings with a valid port, and that chief and evaluator, when present,
// hold one.  Throws pstrain::error naming what is wrong.
cluster_spec parse_cluster_spec(std::string_view json, std::string_view what = "PSTRAIN_CLUSTER");

struct tf_config {
    cluster_spec cluster;
    task_id task;
};
tf_config parse_tf_config(std::string_view json);

// Splits "host:port" (checked by parse_cluster_spec).
std::pair<std::string, int> split_host_port(std::string_view address);

}  // namespace pstrain
