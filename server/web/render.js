// How a message looks: markdown (marked) with highlighted code (highlight.js)
// and LaTeX math (KaTeX), sanitised by DOMPurify before it reaches the page;
// <think> reasoning folded away; tool calls and tool results as such.
// Everything a model writes goes through markdownToHtml (sanitised) or
// textContent; the page's Content-Security-Policy is the second wall.
"use strict";

const HubzooRender = (() => {
  // Math: $$..$$ and \[..\] as blocks, $..$ and \(..\) inline. A $ must hug its
  // content ("$5 and $6" stays text) and is not followed by a digit.
  const katexOptions = (display) => ({ displayMode: display, throwOnError: false, output: "htmlAndMathml" });
  const math = (tex, display) => {
    try {
      return katex.renderToString(tex, katexOptions(display));
    } catch (e) {
      return `<code>${escapeHtml(tex)}</code>`;
    }
  };
  const mathBlock = {
    name: "mathBlock",
    level: "block",
    start: (src) => { const m = src.match(/\$\$|\\\[/); return m ? m.index : undefined; },
    tokenizer(src) {
      const m = /^\$\$([\s\S]+?)\$\$/.exec(src) || /^\\\[([\s\S]+?)\\\]/.exec(src);
      if (m) return { type: "mathBlock", raw: m[0], text: m[1].trim() };
    },
    renderer: (token) => `<div class="math-block">${math(token.text, true)}</div>`,
  };
  const mathInline = {
    name: "mathInline",
    level: "inline",
    start: (src) => { const m = src.match(/\$|\\\(/); return m ? m.index : undefined; },
    tokenizer(src) {
      const m = /^\$\$([^$]+?)\$\$/.exec(src) || /^\$(?=\S)((?:\\.|[^\\$\n])+?)(?<=\S)\$(?!\d)/.exec(src) ||
                /^\\\(([\s\S]+?)\\\)/.exec(src);
      if (m) return { type: "mathInline", raw: m[0], text: m[1].trim() };
    },
    renderer: (token) => math(token.text, false),
  };
  marked.use({ extensions: [mathBlock, mathInline], gfm: true, breaks: false, mangle: false, headerIds: false });

  function escapeHtml(s) {
    return s.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  }

  // Markdown to HTML that is safe to insert: no script, no event handlers, no javascript: URLs.
  function markdownToHtml(text) {
    return DOMPurify.sanitize(marked.parse(text), { USE_PROFILES: { html: true, mathMl: true, svg: true } });
  }

  async function copyText(text) {
    try {
      await navigator.clipboard.writeText(text);
    } catch (e) {  // not a secure context (http:// from another machine): the old way
      const area = Object.assign(document.createElement("textarea"), { value: text });
      document.body.appendChild(area);
      area.select();
      document.execCommand("copy");
      area.remove();
    }
  }

  function button(label, title, onClick) {
    const b = Object.assign(document.createElement("button"), { type: "button", textContent: label, title });
    b.setAttribute("aria-label", title);
    b.addEventListener("click", onClick);
    return b;
  }

  // After the sanitised HTML is in: highlighted code with a copy button, links in a new tab.
  function decorate(el) {
    for (const code of el.querySelectorAll("pre > code")) {
      const pre = code.parentElement;
      const lang = (code.className.match(/language-([\w+#-]+)/) || [])[1];
      if (lang && hljs.getLanguage(lang)) {
        code.innerHTML = hljs.highlight(lang, code.textContent, true).value;
      } else {
        code.innerHTML = hljs.highlightAuto(code.textContent).value;
      }
      code.classList.add("hljs");
      const bar = document.createElement("div");
      bar.className = "code-bar";
      bar.append(Object.assign(document.createElement("span"), { textContent: lang || "code" }));
      const copy = button("Copy", "Copy the code", async () => {
        await copyText(code.textContent);
        copy.textContent = "Copied";
        setTimeout(() => { copy.textContent = "Copy"; }, 1500);
      });
      copy.className = "copy-code";
      bar.append(copy);
      pre.before(bar);
    }
    for (const a of el.querySelectorAll("a[href]")) {
      a.target = "_blank";
      a.rel = "noopener noreferrer";
    }
  }

  function fillMarkdown(el, text) {
    el.innerHTML = markdownToHtml(text);
    decorate(el);
  }

  // "<think>why</think>answer" (also an unterminated <think> while it streams).
  function splitReasoning(text) {
    const open = text.indexOf("<think>");
    if (open < 0 || text.slice(0, open).trim()) return { reasoning: "", answer: text, thinking: false };
    const close = text.indexOf("</think>", open);
    if (close < 0) return { reasoning: text.slice(open + 7), answer: "", thinking: true };
    return { reasoning: text.slice(open + 7, close).trim(), answer: text.slice(close + 8).replace(/^\s+/, ""), thinking: false };
  }

  function reasoningView(reasoning, thinking) {
    const d = document.createElement("details");
    d.className = "reasoning";
    const s = document.createElement("summary");
    s.textContent = thinking ? "Thinking\u2026" : "Reasoning";
    const body = document.createElement("div");
    body.className = "md";
    fillMarkdown(body, reasoning);
    d.append(s, body);
    return d;
  }

  function prettyJson(text) {
    if (typeof text !== "string") return JSON.stringify(text, null, 2);
    try { return JSON.stringify(JSON.parse(text), null, 2); } catch (e) { return text; }
  }

  // An assistant's tool calls: [{id, type: "function", function: {name, arguments}}].
  function toolCallsView(calls) {
    const box = document.createElement("div");
    box.className = "tool-calls";
    for (const call of calls) {
      const fn = call.function || {};
      const d = document.createElement("div");
      d.className = "tool-call";
      const head = document.createElement("div");
      head.className = "tool-head";
      head.textContent = `Tool call: ${fn.name || "?"}` + (call.id ? ` (${call.id})` : "");
      const pre = document.createElement("pre");
      pre.textContent = prettyJson(fn.arguments ?? "");
      d.append(head, pre);
      box.append(d);
    }
    return box;
  }

  const percent = (logprob) => `${(100 * Math.exp(logprob)).toFixed(1)}%`;

  // Each generated token shaded by its probability; its alternatives in the tooltip
  // (and to screen readers, as its label).
  function logprobsView(entries) {
    const d = document.createElement("details");
    d.className = "logprobs";
    const s = document.createElement("summary");
    s.textContent = `Token probabilities (${entries.length} tokens)`;
    const p = document.createElement("p");
    for (const e of entries) {
      const span = document.createElement("span");
      span.className = "tok";
      span.textContent = e.token;
      const prob = Math.exp(e.logprob);
      span.style.setProperty("--p", prob.toFixed(3));
      const alternatives = (e.top || []).map((a) => `${JSON.stringify(a.token)} ${percent(a.logprob)}`).join(", ");
      span.title = `${JSON.stringify(e.token)} ${percent(e.logprob)}` + (alternatives ? `; top: ${alternatives}` : "");
      span.setAttribute("aria-label", span.title);
      span.tabIndex = 0;
      p.append(span);
    }
    d.append(s, p);
    return d;
  }

  // A message's body (not its buttons): the reasoning, the answer, the tool calls.
  function messageBody(msg) {
    const body = document.createElement("div");
    body.className = "body";
    if (msg.role === "user" || msg.role === "system") {
      body.classList.add("plain");
      body.textContent = msg.content || "";
      return body;
    }
    if (msg.role === "tool") {
      const head = document.createElement("div");
      head.className = "tool-head";
      head.textContent = "Tool result" + (msg.name ? `: ${msg.name}` : "") + (msg.tool_call_id ? ` (${msg.tool_call_id})` : "");
      const pre = document.createElement("pre");
      pre.textContent = prettyJson(msg.content ?? "");
      body.append(head, pre);
      return body;
    }
    const { reasoning, answer, thinking } = splitReasoning(msg.content || "");
    const why = [msg.reasoning_content, reasoning].filter(Boolean).join("\n\n");
    if (why) body.append(reasoningView(why, thinking && !msg.done));
    const md = document.createElement("div");
    md.className = "md";
    fillMarkdown(md, answer);
    body.append(md);
    if (Array.isArray(msg.tool_calls) && msg.tool_calls.length) body.append(toolCallsView(msg.tool_calls));
    if (Array.isArray(msg.logprobs) && msg.logprobs.length) body.append(logprobsView(msg.logprobs));
    return body;
  }

  return { markdownToHtml, fillMarkdown, messageBody, splitReasoning, copyText, button };
})();
