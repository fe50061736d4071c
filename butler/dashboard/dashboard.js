// The dashboards of a Butler daemon and of a Butler registry (body's data-view says which).
// Read-only. The token is kept in this tab's sessionStorage only (never in a URL or a
// cookie) and sent as "Authorization: Bearer" to this origin's JSON APIs. Everything a
// peer or a caller chose (task text, names, cards) is set as text, never as HTML.
"use strict";

(() => {
  const TOKEN_KEY = "butler.token";
  const REFRESH_MS = 2000;
  const STALE_MS = 3 * REFRESH_MS;  // no answer for this long: the page says it is old
  let lastUpdate = 0;
  const view = document.body.dataset.view;
  const $ = (id) => document.getElementById(id);
  let timer = null;

  // --- the page's parts ---------------------------------------------------------------

  function el(tag, className, ...children) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    for (const child of children) {
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  // Each cell is labelled with its column's heading: on a narrow screen the stylesheet
  // stacks a row's cells, and the label says what each is.
  function table(headings, rows, empty) {
    if (rows.length === 0) return el("p", "empty", empty);
    const head = el("tr", "", ...headings.map((h) => el("th", "", h)));
    const body = el("tbody");
    for (const row of rows) {
      if (!row.classList.contains("sub")) {
        [...row.children].forEach((cell, i) => { cell.dataset.label = headings[i] || ""; });
      }
      body.append(row);
    }
    return el("table", "", el("thead", "", head), body);
  }

  function row(...cells) {
    return el("tr", "", ...cells.map((c) => (c instanceof Node && c.tagName === "TD" ? c : el("td", "", c))));
  }

  function badge(text, kind) {
    return el("span", `badge ${kind}`, text);
  }

  function show(id, node) {
    $(id).replaceChildren(node);
  }

  // The header and the sign-in form, the same on every page. The form is never submitted
  // (the page's policy has form-action 'none'): the script reads it.
  function frame() {
    const signout = el("button", "", "Sign out");
    Object.assign(signout, { id: "signout", type: "button", hidden: true });
    const header = el("header", "", el("h1", "", document.body.dataset.title),
                      Object.assign(el("span"), { id: "where" }),
                      Object.assign(el("span"), { id: "status" }), signout);
    $("board").before(header);
    const input = Object.assign(el("input"), {
      id: "token", name: "token", type: "password", autocomplete: "off", spellcheck: false,
      required: true,
    });
    const label = Object.assign(el("label", "", "Bearer token"), { htmlFor: "token" });
    const submit = Object.assign(el("button", "", "Sign in"), { type: "submit" });
    const problem = Object.assign(el("p", "error"), { id: "login-error" });
    problem.setAttribute("role", "alert");
    const form = el("form", "", el("h2", "", "Sign in"), label, input, submit, problem,
                    el("p", "note", "The token stays in this tab only (its session storage) " +
                                    "and goes only to this server, in the Authorization header."));
    Object.assign(form, { id: "login", autocomplete: "off" });
    $("board").before(form);
    const stale = Object.assign(el("p"), { id: "stale", hidden: true });
    stale.setAttribute("role", "alert");
    $("board").prepend(stale);
    $("status").setAttribute("role", "status");
  }

  // --- talking to the server ----------------------------------------------------------

  class ApiError extends Error {
    constructor(status, code, message) {
      super(`${code}: ${message}`);
      this.status = status;
      this.code = code;
    }
  }

  async function getJSON(path, token) {
    let response;
    try {
      response = await fetch(path, {
        headers: { Authorization: `Bearer ${token}`, Accept: "application/json" },
        cache: "no-store", credentials: "omit", redirect: "error",
      });
    } catch (err) {
      throw new ApiError(0, "unreachable", "the server did not answer");
    }
    let body = null;
    try {
      body = await response.json();
    } catch (err) {
      body = null;
    }
    if (!response.ok) {
      const error = body && body.error ? body.error : {};
      throw new ApiError(response.status, error.code || `http_${response.status}`,
                         error.message || response.statusText);
    }
    return body;
  }

  // --- formatting -----------------------------------------------------------------------

  function seconds(value) {
    if (value < 1) return `${Math.round(value * 1000)} ms`;
    if (value < 60) return `${value.toFixed(1)} s`;
    if (value < 3600) return `${Math.round(value / 60)} min`;
    return `${(value / 3600).toFixed(1)} h`;
  }

  function between(from, to) {
    const start = Date.parse(from);
    const end = Date.parse(to);
    return Number.isNaN(start) || Number.isNaN(end) ? "?" : seconds(Math.max(end - start, 0) / 1000);
  }

  function clock(stamp) {
    const at = Date.parse(stamp);
    if (Number.isNaN(at)) return el("span", "", "-");
    const node = el("time", "", new Date(at).toLocaleTimeString());
    node.dateTime = stamp;
    node.title = stamp;
    return node;
  }

  function stateBadge(state) {
    const kind = { completed: "ok", failed: "bad", rejected: "bad", canceled: "muted" }[state] || "busy";
    return badge(state, kind);
  }

  // --- the daemon's view ----------------------------------------------------------------

  function costTree(node) {
    const line = el("span", "hop",
      el("strong", "", node.agent), ` / ${node.skill || "-"}: ${node.cost_usd} USD`,
      node.total_usd !== node.cost_usd ? ` (tree ${node.total_usd} USD)` : "",
      `, ${node.duration_ms} ms, `, stateBadge(node.status));
    const item = el("li", "", line);
    if (node.children && node.children.length) {
      item.append(el("ul", "", ...node.children.map(costTree)));
    }
    return item;
  }

  function waitingText(wait) {
    const path = wait.path.join(" \u2192 ");
    return `waiting on ${wait.peer} (hop ${wait.hop}: ${path}) for ` +
           `${between(wait.since, new Date().toISOString())}`;
  }

  function taskRows(tasks, running) {
    const rows = [];
    for (const task of tasks) {
      const budget = task.budget ? `${task.budget.spent_usd} of ${task.budget.start_usd} USD` : "-";
      const last = running ? between(task.started_at, new Date().toISOString())
                           : el("span", "", clock(task.ended_at), ` (${between(task.started_at, task.ended_at)})`);
      rows.push(row(el("td", "mono id", task.id), el("strong", "caller", task.caller),
                    stateBadge(task.state), task.skill || "-", clock(task.started_at), last,
                    budget));
      const details = [el("p", "text", task.text || "(no text)")];
      for (const wait of task.waiting_on || []) details.push(el("p", "waiting", waitingText(wait)));
      if (task.error) details.push(el("p", "error", `${task.error.code}: ${task.error.message}`));
      if (task.cost) details.push(el("ul", "tree", costTree(task.cost)));
      details.push(el("p", "trace", "trace ", el("span", "mono", task.trace_id || "-")));
      const cell = el("td", "detail", ...details);
      cell.colSpan = 7;
      rows.push(el("tr", "sub", cell));
    }
    return rows;
  }

  function tasksView(tasks) {
    const running = tasks.filter((t) => !["completed", "failed", "canceled", "rejected"].includes(t.state));
    const recent = tasks.filter((t) => !running.includes(t));
    show("running", table(["Task", "Caller", "State", "Skill", "Started", "Running for", "Spent"],
                          taskRows(running, true), "No task is running."));
    show("recent", table(["Task", "Caller", "State", "Skill", "Started", "Ended", "Spent"],
                         taskRows(recent, false), "No finished task yet."));
  }

  function peersView(peers) {
    const health = { ok: "ok", failing: "bad", unknown: "muted" };
    const time = (value) => (value === null ? "-" : seconds(value));
    show("peers", table(
      ["Peer", "URL", "Source", "Health now", "Delegations (24 h)", "Median time",
       "95th percentile", "Errors by code", "Capabilities"],
      peers.map((p) => row(
        el("strong", "", p.name), el("span", "mono", p.url), p.source,
        badge(p.health, health[p.health] || "muted"), String(p.history.delegations),
        time(p.history.median_seconds), time(p.history.p95_seconds),
        Object.entries(p.history.errors).map(([k, v]) => `${k} ${v}`).join(", ") || "none",
        p.capabilities.join(", "))),
      "No peer is configured or found."));
  }

  function windowText(use, usdCap, taskCap) {
    if (!use) return "-";
    const usd = usdCap === null || usdCap === undefined ? `${use.usd} USD` : `${use.usd} of ${usdCap} USD`;
    const count = taskCap === null || taskCap === undefined ? `${use.tasks} tasks` : `${use.tasks} of ${taskCap} tasks`;
    return `${usd}, ${count}`;
  }

  function spendView(callers) {
    show("spend", table(
      ["Caller", "Spent since start", "Last hour", "Last day", "Running"],
      callers.map((c) => {
        const lim = c.limits || {};
        return row(el("strong", "", c.caller), `${c.spent_since_start_usd} USD`,
                   windowText(c.last_hour, lim.max_usd_per_hour, lim.max_tasks_per_hour),
                   windowText(c.last_day, lim.max_usd_per_day, lim.max_tasks_per_day),
                   c.running ? `${c.running.tasks} holding ${c.running.reserved_usd} USD` : "-");
      }),
      "No caller has spent anything or has limits."));
  }

  async function refreshDaemon(token) {
    const [tasks, overview] = await Promise.all([
      getJSON("v2/overview/tasks?limit=50", token),
      getJSON("v2/overview", token).catch((err) => {
        if (err.status === 403) return { forbidden: err.message };
        throw err;
      }),
    ]);
    tasksView(tasks.tasks);
    if (overview.forbidden) {
      const note = `Peers and spend need a token of tier admin (${overview.forbidden}).`;
      show("peers", el("p", "empty", note));
      show("spend", el("p", "empty", note));
    } else {
      $("where").textContent = `${overview.agent.id} at ${overview.agent.url}`;
      peersView(overview.peers);
      spendView(overview.spend);
    }
  }

  // --- the registry's view --------------------------------------------------------------

  const MAX_PAGES = 10;  // of the registry's page size each

  async function refreshRegistry(token) {
    const agents = [];
    let cursor = null;
    for (let page = 0; page < MAX_PAGES; page += 1) {
      const data = await getJSON(cursor ? `v1/agents?cursor=${encodeURIComponent(cursor)}` : "v1/agents", token);
      agents.push(...data.agents);
      cursor = data.next_cursor;
      if (!cursor) break;
    }
    show("agents", table(
      ["Agent", "URL", "Capabilities", "Skills", "Registered by", "Expires in"],
      agents.map((a) => row(
        el("strong", "", a.display_name && a.display_name !== a.name ? `${a.name} (${a.display_name})` : a.name),
        el("span", "mono", a.url), a.capabilities.join(", ") || "-", a.skills.join(", ") || "-",
        a.owner, seconds(a.expires_in_seconds))),
      "No agent is registered now."));
  }

  const VIEWS = {
    daemon: { check: "v2/tasks?limit=1", refresh: refreshDaemon },
    registry: { check: "v1/agents?limit=1", refresh: refreshRegistry },
  };

  // --- signing in and out, refreshing ---------------------------------------------------

  function signedIn(on) {
    $("login").hidden = on;
    $("board").hidden = !on;
    $("signout").hidden = !on;
  }

  function signOut(reason) {
    clearTimeout(timer);
    lastUpdate = 0;
    markStale();
    sessionStorage.removeItem(TOKEN_KEY);
    signedIn(false);
    $("status").textContent = "";
    $("login-error").textContent = reason || "";
    $("token").focus();
  }

  async function refresh() {
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (!token) return;
    try {
      await VIEWS[view].refresh(token);
      lastUpdate = Date.now();
      markStale();
      $("status").textContent = `updated ${new Date().toLocaleTimeString()}`;
      $("status").className = "";
    } catch (err) {
      if (err.status === 401) {
        signOut(`Signed out: ${err.message}`);
        return;
      }
      $("status").textContent = `refresh failed (showing the last answer): ${err.message}`;
      $("status").className = "error";
    }
    timer = setTimeout(refresh, REFRESH_MS);
  }

  // Old data must not look live: once no refresh has succeeded for STALE_MS, the board
  // is greyed and a banner says since when it has not changed.
  function markStale() {
    const old = lastUpdate > 0 && Date.now() - lastUpdate > STALE_MS;
    document.body.classList.toggle("stale", old);
    $("stale").hidden = !old;
    if (old) {
      const ago = seconds((Date.now() - lastUpdate) / 1000);
      $("stale").textContent = `Stale: no update for ${ago} (last at ` +
        `${new Date(lastUpdate).toLocaleTimeString()}); what is shown may be out of date.`;
    }
  }

  async function signIn(event) {
    event.preventDefault();
    const input = $("token");
    const token = input.value.trim();
    $("login-error").textContent = "";
    if (!token) {
      $("login-error").textContent = "Type a token first.";
      return;
    }
    try {
      await getJSON(VIEWS[view].check, token);
    } catch (err) {
      $("login-error").textContent = `Sign-in failed: ${err.message}`;
      return;
    }
    input.value = "";
    sessionStorage.setItem(TOKEN_KEY, token);
    signedIn(true);
    refresh();
  }

  frame();
  setInterval(markStale, 1000);
  $("where").textContent = location.host;
  $("login").addEventListener("submit", signIn);
  $("signout").addEventListener("click", () => signOut(""));
  if (sessionStorage.getItem(TOKEN_KEY)) {
    signedIn(true);
    refresh();
  } else {
    signedIn(false);
  }
})();
