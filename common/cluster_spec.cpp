#include "common/cluster_spec.hpp"

#include "pstrain/error.hpp"
#include "common/parse.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace pstrain {

using nlohmann::json;

std::string_view role_name(role r) { return r == role::ps ? "ps" : "worker"; }

namespace {

json cluster_json(const cluster_spec& spec) { return json{{"ps", spec.ps}, {"worker", spec.worker}}; }

std::vector<std::string> address_list(const json& cluster, const char* key, std::string_view what)
{
    auto it = cluster.find(key);
    if (it == cluster.end() || !it->is_array() || it->empty())
        throw error(fmt::format("{}: \"{}\" must be a non-empty list of \"host:port\" strings", what, key));
    std::vector<std::string> out;
    for (const auto& a : *it) {
        if (!a.is_string()) throw error(fmt::format("{}: \"{}\" holds a non-string entry", what, key));
        auto address = a.get<std::string>();
        try {
            split_host_port(address);
        } catch (const error& e) {
            throw error(fmt::format("{}: {}", what, e.what()));
        }
        out.push_back(std::move(address));
    }
    return out;
}

json parse_object(std::string_view text, std::string_view what)
{
    json j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object())
        throw error(fmt::format("{} is not a JSON object: check its value", what));
    return j;
}

}  // namespace

std::pair<std::string, int> split_host_port(std::string_view address)
{
    auto colon = address.rfind(':');
    if (colon == std::string_view::npos || colon == 0)
        throw error(fmt::format("address '{}' is not host:port", address));
    auto port = parse_count(address.substr(colon + 1), 1, 65535);
    if (!port) throw error(fmt::format("address '{}' has no valid port (1-65535)", address));
    return {std::string(address.substr(0, colon)), static_cast<int>(*port)};
}

std::string to_json(const cluster_spec& spec) { return cluster_json(spec).dump(); }

std::string tf_config_json(const cluster_spec& spec, task_id task)
{
    json j{{"cluster", cluster_json(spec)},
           {"task", {{"type", std::string(role_name(task.role))}, {"index", task.index}}}};
    return j.dump();
}

cluster_spec parse_cluster_spec(std::string_view text, std::string_view what)
{
    json j = parse_object(text, what);
    return cluster_spec{address_list(j, "ps", what), address_list(j, "worker", what)};
}

tf_config parse_tf_config(std::string_view text)
{
    json j = parse_object(text, "TF_CONFIG");
    auto cluster = j.find("cluster");
    if (cluster == j.end() || !cluster->is_object())
        throw error("TF_CONFIG has no \"cluster\" object: set it as {\"cluster\":{...},\"task\":{...}}");
    tf_config out;
    out.cluster = cluster_spec{address_list(*cluster, "ps", "TF_CONFIG"), address_list(*cluster, "worker", "TF_CONFIG")};
    auto task = j.find("task");
    if (task == j.end() || !task->is_object() || !task->contains("type") || !task->contains("index") ||
        !(*task)["type"].is_string() || !(*task)["index"].is_number_integer())
        throw error("TF_CONFIG has no valid \"task\": set it as {\"type\":\"ps\"|\"worker\",\"index\":N}");
    auto type = (*task)["type"].get<std::string>();
    int index = (*task)["index"].get<int>();
    if (type == "ps") {
        out.task = {role::ps, index};
    } else if (type == "worker") {
        out.task = {role::worker, index};
    } else if (type == "chief") {
        throw error("TF_CONFIG task type 'chief' is not used by pstrain: its chief is worker 0, list it first under \"worker\"");
    } else {
        throw error(fmt::format("TF_CONFIG task type '{}' is not ps or worker", type));
    }
    if (index < 0 || static_cast<std::size_t>(index) >= out.cluster.tasks(out.task.role).size())
        throw error(fmt::format("TF_CONFIG task index {} is outside the {} list ({} entries)", index, type,
                                out.cluster.tasks(out.task.role).size()));
    return out;
}

}  // namespace pstrain
