"""The LLM planner: an OpenAI-compatible chat-completions endpoint that plans a task in
several steps with the caller's skills and peers as its tools (docs/intent.md)."""

from butler.planner.client import ChatClient
from butler.planner.plan import PlanHost, Planner, ToolOutcome
from butler.planner.tools import Step, Toolbox
from butler.planner.wire import Usage

__all__ = ["ChatClient", "PlanHost", "Planner", "Step", "ToolOutcome", "Toolbox",
           "Usage"]
