// The console's playground: a multi-turn chat. Each turn is sent with the turns before it
// (and the system prompt, temperature and max tokens when set); the reply's server-sent events
// are shown as they arrive, then kept as the conversation's next assistant turn. Under the
// reply: the serving model's registered name and filing number, when the answer carries them
// (the disclosure feature's headers; non-ASCII text arrives as RFC 8187 UTF-8'' encoding).
(function () {
  "use strict";
  const form = document.getElementById("chat");
  const reply = document.getElementById("reply");
  const status = document.getElementById("chat-status");
  const history = document.getElementById("conversation");
  const disclosure = document.getElementById("disclosure");
  let turns = []; // {role: "user" | "assistant", content}

  function show() {
    history.replaceChildren();
    for (const turn of turns) {
      const item = document.createElement("li");
      item.className = "turn " + turn.role;
      const who = document.createElement("strong");
      who.textContent = turn.role === "user" ? "You: " : "Assistant: ";
      item.append(who, document.createTextNode(turn.content));
      history.append(item);
    }
  }

  function headerText(resp, name) {
    const value = resp.headers.get(name);
    if (value === null || !value.startsWith("UTF-8''")) return value;
    try {
      return decodeURIComponent(value.slice(7));
    } catch (err) {
      return value;
    }
  }

  function disclose(resp) {
    const parts = [];
    const model = headerText(resp, "x-fleetgate-model-name");
    const number = headerText(resp, "x-fleetgate-filing-number");
    if (model) parts.push("Registered model: " + model);
    if (number) parts.push("Filing number: " + number);
    disclosure.textContent = parts.join(" · "); // text, never markup
    disclosure.hidden = parts.length === 0;
  }

  function body() {
    const messages = [];
    const system = form.elements.system.value.trim();
    if (system) messages.push({ role: "system", content: system });
    const out = { model: form.elements.model.value, messages: messages.concat(turns) };
    const temperature = form.elements.temperature.value;
    if (temperature !== "") out.temperature = Number(temperature);
    const maxTokens = form.elements.max_tokens.value;
    if (maxTokens !== "") out.max_tokens = Number(maxTokens);
    return out;
  }

  async function send(event) {
    event.preventDefault();
    turns.push({ role: "user", content: form.elements.prompt.value });
    show();
    reply.textContent = "";
    disclosure.textContent = "";
    disclosure.hidden = true;
    reply.setAttribute("aria-busy", "true");
    status.textContent = "Streaming…";
    let chunks = 0;
    let text = "";
    try {
      const resp = await fetch("/ui/playground/chat", {
        method: "POST",
        headers: { "Content-Type": "application/json", "X-CSRF-Token": form.dataset.csrf },
        body: JSON.stringify(body()),
        credentials: "same-origin",
      });
      disclose(resp);
      if (!resp.ok || !resp.body) {
        const err = await resp.json().catch(() => ({}));
        throw new Error((err.error && err.error.message) || "HTTP " + resp.status);
      }
      const reader = resp.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const event = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          for (const line of event.split("\n")) {
            if (!line.startsWith("data: ")) continue;
            const data = line.slice(6);
            if (data === "[DONE]") continue;
            const parsed = JSON.parse(data);
            if (parsed.error) throw new Error(parsed.error.message);
            const delta = parsed.choices && parsed.choices[0] && parsed.choices[0].delta;
            if (delta && delta.content) {
              text += delta.content;
              reply.textContent = text;
              chunks += 1;
              reply.dataset.chunks = String(chunks);
            }
          }
        }
      }
      turns.push({ role: "assistant", content: text });
      form.elements.prompt.value = "";
      status.textContent = "Done: " + chunks + " chunks, turn " + turns.length / 2 + ".";
    } catch (err) {
      turns.pop(); // the unanswered message is not part of the conversation
      show();
      status.textContent = "Error: " + err.message;
    } finally {
      reply.setAttribute("aria-busy", "false");
    }
  }

  function reset() {
    turns = [];
    show();
    reply.textContent = "";
    disclosure.textContent = "";
    disclosure.hidden = true;
    status.textContent = "New conversation.";
  }

  form.addEventListener("submit", send);
  document.getElementById("new-chat").addEventListener("click", reset);
})();
