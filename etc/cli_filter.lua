--[[
pstrain cli_filter: a job or step given --ps=N --workers=M (and --chief,
--evaluator: one task each; --ps-spares=K: K tasks) and no task count gets
--ntasks=N+M(+1+1+K); a task count that is not that is refused before the
job is queued.  Needs CliFilterPlugins=cli_filter/lua in slurm.conf, and this file as
cli_filter.lua beside slurm.conf.

Sites with a cli_filter.lua of their own load this file from it and call
pstrain_cli.pre_submit from their slurm_cli_pre_submit:

  dofile("/usr/share/pstrain/cli_filter.lua")
  function slurm_cli_pre_submit(options, offset)
      local rc = pstrain_cli.pre_submit(options, offset)
      if rc ~= slurm.SUCCESS then return rc end
      -- ... the site's own checks ...
      return slurm.SUCCESS
  end
--]]

pstrain_cli = {}

-- Slurm 22.05 exposes SPANK options as options["spank"]["pstrain"]["ps"].
local function spank_value(options, name)
    local spank = options["spank"]
    if type(spank) ~= "table" or type(spank["pstrain"]) ~= "table" then return nil end
    return spank["pstrain"][name]
end

-- Whether the user set a task count: options["ntasks"] always reads as a
-- number, only the JSON of the options that were set tells.
local function ntasks_given(options)
    if slurm.json_cli_options == nil then return options["ntasks"] ~= "1" end
    return string.find(slurm.json_cli_options(options), '"ntasks":', 1, true) ~= nil
end

local function whole(text)
    if text == nil or not string.match(text, "^%d+$") then return nil end
    return tonumber(text)
end

-- A flag without a value (--chief, --evaluator): Slurm 22.05 reads it as
-- "set" when given and "unset" when not.
local function flag_set(options, name)
    return spank_value(options, name) == "set"
end

function pstrain_cli.pre_submit(options, offset)
    local ps, workers = whole(spank_value(options, "ps")), whole(spank_value(options, "workers"))
    -- Missing or invalid values are for the SPANK plugin to report.
    if ps == nil or workers == nil or ps < 1 or workers < 1 then return slurm.SUCCESS end
    local want, flags = ps + workers, string.format("--ps=%d --workers=%d", ps, workers)
    if flag_set(options, "chief") then want = want + 1; flags = flags .. " --chief" end
    if flag_set(options, "evaluator") then want = want + 1; flags = flags .. " --evaluator" end
    -- --ps-spares=K: K more ps tasks (an invalid value is the plugin's to report).
    local spares = whole(spank_value(options, "ps-spares"))
    if spares ~= nil and spares > 0 then
        want = want + spares; flags = flags .. string.format(" --ps-spares=%d", spares)
    end
    if ntasks_given(options) then
        local have = whole(options["ntasks"])
        if have ~= nil and have ~= want then
            slurm.log_error("pstrain: %s needs %d tasks, the job asks for %d: use -n %d (or leave -n out; a step " ..
                "that is not the job's training step, such as pstrain --join, gives --ps=0 --workers=0)",
                flags, want, have, want)
            return slurm.ERROR
        end
        return slurm.SUCCESS
    end
    options["ntasks"] = tostring(want)
    slurm.log_verbose("pstrain: %s: set --ntasks=%d", flags, want)
    return slurm.SUCCESS
end

if slurm_cli_setup_defaults == nil then
    function slurm_cli_setup_defaults(options, early_pass) return slurm.SUCCESS end
end
if slurm_cli_pre_submit == nil then
    function slurm_cli_pre_submit(options, offset) return pstrain_cli.pre_submit(options, offset) end
end
if slurm_cli_post_submit == nil then
    function slurm_cli_post_submit(offset, job_id, step_id) return slurm.SUCCESS end
end
