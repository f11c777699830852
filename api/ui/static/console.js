// The console's behaviour: live refresh of <main>, log in/out, confirmed actions through the
// REST API (JSON bodies: the API refuses anything else). No dependencies.
(() => {
  "use strict";
  const main = document.getElementById("main");
  const refreshMs = Number(document.body.dataset.refreshMs || 2000);
  const live = document.getElementById("live-state");
  let editing = false;

  async function refresh(force) {
    // never replace the page under someone typing in a form or reading a dialog
    if (!force && (editing || document.getElementById("confirm").open || document.hidden)) return;
    try {
      const r = await fetch(location.pathname + location.search, {
        headers: { "X-UI-Fragment": "1" }, credentials: "same-origin", cache: "no-store" });
      if (r.redirected && r.url.includes("/ui/login")) { location.href = r.url; return; }
      const html = await r.text();
      if (html !== main.dataset.last) { main.innerHTML = html; main.dataset.last = html; }
      document.body.classList.toggle("stale", !r.ok);
      live.textContent = r.ok ? "live" : `node answered ${r.status}`;
    } catch (e) {
      document.body.classList.add("stale");
      live.textContent = "node unreachable: retrying";
    }
  }
  if (!document.getElementById("login")) setInterval(refresh, refreshMs);
  document.addEventListener("focusin", (e) => {
    editing = e.target.matches("input, select, textarea") && !!e.target.closest("form");
  });
  document.addEventListener("focusout", () => { editing = false; });

  function confirmStep(text) {
    const dialog = document.getElementById("confirm");
    document.getElementById("confirm-text").textContent = text;
    return new Promise((resolve) => {
      dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
      dialog.showModal();
      document.getElementById("confirm-ok").focus();
    });
  }

  async function call(method, url, body) {
    const r = await fetch(url, { method, credentials: "same-origin",
      headers: { "Content-Type": "application/json" }, body: JSON.stringify(body ?? {}) });
    if (r.ok) return r.status === 204 ? null : r.json();
    let detail = `${r.status}`;
    try { detail = (await r.json()).detail || detail; } catch (e) { /* not JSON */ }
    throw new Error(detail);
  }

  function say(text, ok) {
    const s = document.getElementById("action-status");
    if (!s) return;
    s.textContent = text; s.className = "status " + (ok ? "ok" : "bad");
  }

  const actions = {
    rebalance: (g, f) => [`Force a rebalance of ${g} (reason: "${f.reason.value}")? Every member rejoins.`,
      () => call("POST", `/groups/${encodeURIComponent(g)}/rebalance`, { reason: f.reason.value })],
    register: (g, f) => {
      const ids = f.ids.value.split(",").map((s) => s.trim()).filter(Boolean);
      return [`Pre-register ${ids.join(", ")} in ${g}?`, () => call("POST",
        `/groups/${encodeURIComponent(g)}/static-members`,
        { group_instance_ids: ids, expansion_timeout_ms: Number(f.timeout.value) })];
    },
    offsets: (g, f) => {
      const offsets = f.offsets.value.split(",").map((s) => s.trim()).filter(Boolean).map((s) => {
        const [tp, off] = s.split("="); const i = tp.lastIndexOf(":");
        return { topic: tp.slice(0, i).trim(), partition: Number(tp.slice(i + 1)), offset: Number(off) };
      });
      return [`Set ${offsets.length} committed offset(s) of ${g}?`,
        () => call("POST", `/groups/${encodeURIComponent(g)}/offsets`, { offsets })];
    },
    delete: (g) => [`Delete group ${g} and its committed offsets? This cannot be undone.`,
      () => call("DELETE", `/groups/${encodeURIComponent(g)}`).then(() => { location.href = "/ui/groups"; })],
    remove: (g, f, instance) => [`Remove static member ${instance} from ${g}? The group rebalances.`,
      () => call("DELETE", `/groups/${encodeURIComponent(g)}/static-members/${encodeURIComponent(instance)}`)],
  };

  async function run(kind, form, instance) {
    const section = document.querySelector(".actions");
    const group = section && section.dataset.group;
    const [question, act] = actions[kind](group, form, instance);
    if (!(await confirmStep(question))) return;
    try {
      await act();
      if (form && form.reset) form.reset();
      await refresh(true);
      say(`Done: ${kind}.`, true);
    }
    catch (e) { say(`Refused: ${e.message}`, false); }
  }

  document.addEventListener("submit", async (e) => {
    const form = e.target;
    if (form.id === "login") {
      e.preventDefault();
      const body = {};
      for (const k of ["token", "user", "password"]) if (form[k] && form[k].value) body[k] = form[k].value;
      const r = await fetch("/ui/session", { method: "POST", credentials: "same-origin",
        headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
      if (r.ok) location.href = form.dataset.next;
      else document.getElementById("login-status").textContent = "Wrong token, user name or password.";
      return;
    }
    if (form.dataset.action) { e.preventDefault(); editing = false; run(form.dataset.action, form); }
  });
  document.addEventListener("click", async (e) => {
    const b = e.target.closest("button[data-action]");
    if (b) run(b.dataset.action, null, b.dataset.instance);
    if (e.target.id === "logout") {
      await fetch("/ui/logout", { method: "POST", credentials: "same-origin", headers: { "Content-Type": "application/json" }, body: "{}" });
      location.href = "/ui/login";
    }
  });
})();
