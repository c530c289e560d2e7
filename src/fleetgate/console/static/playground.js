// The console's playground: post a chat, read the server-sent events as they arrive.
(function () {
  "use strict";
  const form = document.getElementById("chat");
  const reply = document.getElementById("reply");
  const status = document.getElementById("chat-status");

  async function send(event) {
    event.preventDefault();
    reply.textContent = "";
    reply.setAttribute("aria-busy", "true");
    status.textContent = "Streaming…";
    let chunks = 0;
    const body = {
      model: form.elements.model.value,
      messages: [{ role: "user", content: form.elements.prompt.value }],
    };
    try {
      const resp = await fetch("/ui/playground/chat", {
        method: "POST",
        headers: { "Content-Type": "application/json", "X-CSRF-Token": form.dataset.csrf },
        body: JSON.stringify(body),
        credentials: "same-origin",
      });
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
              reply.textContent += delta.content;
              chunks += 1;
              reply.dataset.chunks = String(chunks);
            }
          }
        }
      }
      status.textContent = "Done: " + chunks + " chunks.";
    } catch (err) {
      status.textContent = "Error: " + err.message;
    } finally {
      reply.setAttribute("aria-busy", "false");
    }
  }
  form.addEventListener("submit", send);
})();
