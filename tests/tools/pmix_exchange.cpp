// pmix_exchange: every rank publishes a value with PMIx_Put/Commit, all ranks
// Fence with data collection, then each rank Gets every peer's value and
// checks it.  Prints one line per rank: "rank R of N on HOST: ok (N values)".
// Used by the integration tests to prove PMIx works across virtual nodes.
#include <cstdlib>
#include <cstring>
#include <string>

#include <fmt/format.h>
#include <pmix.h>
#include <unistd.h>

namespace {

int fail(const char* call, pmix_status_t rc)
{
    fmt::print(stderr, "pmix_exchange: {} failed: {}\n", call, PMIx_Error_string(rc));
    return 1;
}

}  // namespace

int main()
{
    pmix_proc_t me;
    pmix_status_t rc = PMIx_Init(&me, nullptr, 0);
    if (rc != PMIX_SUCCESS) return fail("PMIx_Init (run under srun --mpi=pmix)", rc);

    char host[256] = {};
    gethostname(host, sizeof host - 1);
    const char* node = std::getenv("SLURMD_NODENAME");
    std::string mine = fmt::format("value-of-rank-{}-on-{}", me.rank, node ? node : host);

    pmix_value_t value;
    PMIX_VALUE_CONSTRUCT(&value);
    value.type = PMIX_STRING;
    value.data.string = mine.data();
    if ((rc = PMIx_Put(PMIX_GLOBAL, "pstrain.test", &value)) != PMIX_SUCCESS) return fail("PMIx_Put", rc);
    if ((rc = PMIx_Commit()) != PMIX_SUCCESS) return fail("PMIx_Commit", rc);

    pmix_proc_t all;
    PMIX_PROC_CONSTRUCT(&all);
    PMIX_LOAD_PROCID(&all, me.nspace, PMIX_RANK_WILDCARD);
    pmix_info_t collect;
    bool yes = true;
    PMIX_INFO_LOAD(&collect, PMIX_COLLECT_DATA, &yes, PMIX_BOOL);
    if ((rc = PMIx_Fence(&all, 1, &collect, 1)) != PMIX_SUCCESS) return fail("PMIx_Fence", rc);

    pmix_value_t* size = nullptr;
    if ((rc = PMIx_Get(&all, PMIX_JOB_SIZE, nullptr, 0, &size)) != PMIX_SUCCESS)
        return fail("PMIx_Get(PMIX_JOB_SIZE)", rc);
    const std::uint32_t n = size->data.uint32;
    PMIX_VALUE_RELEASE(size);

    int bad = 0;
    for (std::uint32_t r = 0; r < n; ++r) {
        pmix_proc_t peer;
        PMIX_LOAD_PROCID(&peer, me.nspace, r);
        pmix_value_t* got = nullptr;
        if ((rc = PMIx_Get(&peer, "pstrain.test", nullptr, 0, &got)) != PMIX_SUCCESS) return fail("PMIx_Get", rc);
        std::string expected = fmt::format("value-of-rank-{}-on-", r);
        if (got->type != PMIX_STRING || std::strncmp(got->data.string, expected.c_str(), expected.size()) != 0) {
            fmt::print(stderr, "pmix_exchange: rank {} read a wrong value from rank {}\n", me.rank, r);
            ++bad;
        }
        PMIX_VALUE_RELEASE(got);
    }
    PMIx_Finalize(nullptr, 0);
    if (bad) return 1;
    fmt::print("rank {} of {} on {}: ok ({} values)\n", me.rank, n, node ? node : host, n);
    return 0;
}
