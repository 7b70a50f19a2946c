"""The budget guard's reason codes and the other constants the server libraries are rendered with.

One source for Python and the Lua budget library (``mother.functions`` renders them into it):

    dimension          run reason code                      user reason code (daily)
"""

from __future__ import annotations

__all__ = ["CODES", "COUNTED", "RESOURCES", "SEQ_SPAN", "USER_CODES"]

# a run's counter dimension -> the reason code of its hard limit (its warning: _warning for _exceeded)
CODES: dict[str, str] = {
    "duration_sec": "budget_wall_clock_exceeded",
    "tool_calls": "budget_tool_call_exceeded",
    "total_tokens": "budget_token_estimate_exceeded",
    "cloud_calls": "budget_cloud_call_exceeded",
    "model_calls": "budget_model_call_exceeded",
    "spend_micro_usd": "budget_spend_exceeded",
    "retrieval_queries": "budget_retrieval_query_exceeded",
    "parallel_agents": "budget_parallel_agent_exceeded",
    "spawns": "budget_spawn_exceeded",
}
# a user's daily counter dimension -> the reason code of its limit
USER_CODES: dict[str, str] = {
    "runs": "budget_user_daily_runs_exceeded",
    "cloud_calls": "budget_user_daily_cloud_call_exceeded",
    "total_tokens": "budget_user_daily_token_exceeded",
}
# the dimensions that only ever count up (a run's duration is computed, parallel_agents is a gauge): the ones
# Mother keeps a floor under (mh_floor)
COUNTED: dict[str, list[str]] = {
    "run": [d for d in CODES if d not in ("duration_sec", "parallel_agents")],
    "user": list(USER_CODES),
}
__doc__ += "".join(
    f"    {dim:<18} {CODES.get(dim, '-'):<36} {USER_CODES.get(dim, '-')}\n"
    for dim in dict.fromkeys([*CODES, *USER_CODES])
)

# The spec's BudgetExhausted.resource per limit code (the guard's, and the run limits' checked at a turn's
# start); the spec names no resource for model calls, spend or spawns, so those keep a name of their own.
RESOURCES: dict[str, str] = {
    "budget_cloud_call_exceeded": "cloud_calls",
    "budget_user_daily_cloud_call_exceeded": "cloud_calls",
    "budget_token_estimate_exceeded": "tokens",
    "budget_user_daily_token_exceeded": "tokens",
    "tokens_exceeded": "tokens",
    "budget_wall_clock_exceeded": "duration",
    "duration_seconds_exceeded": "duration",
    "budget_tool_call_exceeded": "tools",
    "budget_retrieval_query_exceeded": "retrieval",
    "budget_parallel_agent_exceeded": "parallel",
    "budget_user_daily_runs_exceeded": "queue",
    "budget_model_call_exceeded": "model_calls",
    "turns_exceeded": "model_calls",
    "budget_spend_exceeded": "spend",
    "spend_exceeded": "spend",
    "budget_spawn_exceeded": "spawns",
}

# The admission queue's order: a waiting run's score is its fair-queue tag * SEQ_SPAN + its sequence number.
SEQ_SPAN = 10_000_000
