// specscribe live captions: microphone -> AudioWorklet (16 kHz PCM16) -> WebSocket /v1/listen -> captions.
// Plain modern JS, no build step. The protocol is documented in docs/protocol.md.

const $ = (id) => document.getElementById(id);
const RATE = 16000;
const params = new URLSearchParams(location.search);

const ui = {
  start: $("start"), status: $("status"), statusText: $("status-text"), lag: $("lag"), error: $("error"),
  transcript: $("transcript"), partial: $("partial"), language: $("language"), task: $("task"),
  translate: $("translate"), apiKey: $("api-key"), languages: $("languages"), detected: $("detected"),
};
const languageNames = new Intl.DisplayNames(["en"], { type: "language" });

let live = null; // the running capture + connection, or null
const finals = []; // {id, start, end, text, line, session}: every final, in order
const lines = []; // caption lines {start, end, text, translations, el, closed, session}; the last may be open
const NO_SPACE = new Set(["zh", "yue", "ja", "th", "lo", "my", "km", "bo"]); // written without spaces
const settings = { closeTimeoutMs: 12000 }; // how long Stop waits for the server's close frame
let timeBase = 0; // where the next session's times start: the end of the sessions before it (the exports go on)

if (params.get("api_key")) ui.apiKey.value = params.get("api_key");
if (params.get("languages")) ui.languages.value = params.get("languages");
if (params.get("task") === "translate") ui.task.value = "translate"; // anything else: transcribe
const askedLanguage = (params.get("language") || "").toLowerCase();
if (askedLanguage && askedLanguage !== "auto" && /^[a-z]{2,8}$/.test(askedLanguage)) {
  if (![...ui.language.options].some((o) => o.value === askedLanguage)) { // a code the list lacks: the server checks it
    ui.language.append(new Option(languageName(askedLanguage), askedLanguage));
  }
  ui.language.value = askedLanguage;
} // anything else: detect automatically
if (params.get("translate") === "1") ui.translate.checked = true;

function setStatus(state, text) {
  ui.status.dataset.state = state;
  ui.statusText.textContent = text;
  if (state !== "live") ui.lag.textContent = "";
}

function showError(message) {
  ui.error.textContent = message;
  ui.error.hidden = false;
}

function clearError() {
  ui.error.hidden = true;
  ui.error.textContent = "";
}

function fmtClock(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")}`;
}

function listenUrl() {
  const url = new URL("/v1/listen", location.href);
  url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
  if (ui.apiKey.value) url.searchParams.set("api_key", ui.apiKey.value);
  return url.toString();
}

async function openMicrophone() {
  const stream = await navigator.mediaDevices.getUserMedia({
    audio: { echoCancellation: false, noiseSuppression: false, autoGainControl: false, channelCount: 1 },
  });
  let ctx = null;
  try {
    let source = null;
    if (params.get("rate") !== "native") {
      try { // let the browser resample to 16 kHz where it can
        ctx = new AudioContext({ sampleRate: RATE, latencyHint: "interactive" });
        source = ctx.createMediaStreamSource(stream);
      } catch (err) {
        if (ctx) ctx.close();
        ctx = null;
      }
    }
    if (!ctx) { // the context runs at the device rate; the worklet resamples
      ctx = new AudioContext({ latencyHint: "interactive" });
      source = ctx.createMediaStreamSource(stream);
    }
    await ctx.audioWorklet.addModule(new URL("pcm-worklet.js", import.meta.url));
    const node = new AudioWorkletNode(ctx, "pcm-capture", {
      numberOfInputs: 1, numberOfOutputs: 1, outputChannelCount: [1],
      processorOptions: { targetRate: RATE, chunkSamples: RATE / 10 },
    });
    const mute = ctx.createGain();
    mute.gain.value = 0; // keeps the graph pulling without playing the microphone back
    source.connect(node).connect(mute).connect(ctx.destination);
    if (ctx.state === "suspended") await ctx.resume();
    return { stream, ctx, node };
  } catch (err) { // let go of the microphone (its indicator) and the context, then report
    stream.getTracks().forEach((t) => t.stop());
    if (ctx) ctx.close().catch(() => {});
    throw err;
  }
}

async function start() {
  clearError();
  ui.start.disabled = true;
  setStatus("connecting", "Opening microphone…");
  const session = {
    ws: null, mic: null, sent: 0, queued: [], closing: false, ended: false, serverError: false, closeTimer: 0,
    offset: timeBase, lastEnd: 0, // this session's times (the server's start at 0) go on from the earlier ones
  };
  live = session;
  try {
    session.mic = await openMicrophone();
  } catch (err) {
    if (session.ended) return; // cancelled while the microphone opened: the page has moved on
    live = null;
    ui.start.disabled = false;
    setStatus("error", "Microphone unavailable");
    showError(`Could not open the microphone: ${err.message || err.name}`);
    return;
  }
  if (session.ended) { // Stop (Escape) came while the microphone opened: the start is cancelled
    releaseMic(session);
    return;
  }
  setStatus("connecting", "Connecting…");
  const ws = new WebSocket(listenUrl());
  ws.binaryType = "arraybuffer";
  session.ws = ws;
  session.mic.node.port.onmessage = (event) => sendAudio(session, event.data);
  ws.onopen = () => {
    ws.send(JSON.stringify({
      type: "config", sample_rate: RATE, encoding: "pcm_s16le", channels: 1,
      language: ui.language.value === "auto" ? null : ui.language.value,
      languages: ui.language.value === "auto" ? allowedLanguages() : [],
      task: ui.task.value, translate: ui.translate.checked, interim_results: true,
    }));
    for (const chunk of session.queued) ws.send(chunk);
    session.queued = [];
  };
  ws.onmessage = (event) => onMessage(session, JSON.parse(event.data));
  ws.onerror = () => {
    if (!session.closing && !session.ended) showError("Connection error: is the server running and reachable?");
  };
  ws.onclose = (event) => onClose(session, event);
  ui.start.textContent = "Stop";
  ui.start.setAttribute("aria-pressed", "true");
  ui.start.disabled = false;
  for (const el of [ui.language, ui.task, ui.translate, ui.languages]) el.disabled = true;
  ui.detected.hidden = true;
}

function allowedLanguages() {
  return ui.languages.value.split(/[\s,;]+/).map((c) => c.trim().toLowerCase()).filter(Boolean);
}

function languageName(code) {
  try { return languageNames.of(code) || code; } catch { return code; }
}

function sendAudio(session, chunk) {
  if (session.closing && session.ws.readyState !== WebSocket.OPEN) return;
  session.sent += chunk.length;
  if (session.ws.readyState === WebSocket.OPEN) session.ws.send(chunk.buffer);
  else if (session.ws.readyState === WebSocket.CONNECTING) session.queued.push(chunk.buffer);
}

async function stop() {
  const session = live;
  if (!session || session.closing) return;
  session.closing = true;
  if (!session.mic) { // the microphone is still opening: cancel the start (start() lets go of it once it opens)
    session.ended = true;
    live = null;
    resetControls();
    setStatus("idle", "Stopped");
    return;
  }
  ui.start.disabled = true;
  setStatus("finishing", "Finishing…");
  session.mic.node.port.postMessage("flush");
  await new Promise((resolve) => setTimeout(resolve, 50)); // let the last chunk arrive from the worklet
  releaseMic(session);
  if (session.ws.readyState === WebSocket.OPEN) {
    session.ws.send(JSON.stringify({ type: "close" }));
    waitForClose(session);
  } else { // still connecting: there is nothing to finish
    session.ws.close();
    onClose(session, { code: 1005 });
  }
}

// After `close` the server sends the last finals, then its close frame. When it stays silent for
// settings.closeTimeoutMs (the network is gone?), stop waiting: drop the connection and free the page.
function waitForClose(session) {
  clearTimeout(session.closeTimer);
  session.closeTimer = setTimeout(() => {
    if (session.ended) return;
    showError("The server did not confirm the end of the session; its last captions may be missing.");
    session.ws.close();
    onClose(session, { code: 1006 });
  }, settings.closeTimeoutMs);
}

function releaseMic(session) {
  if (!session.mic) return;
  session.mic.node.port.onmessage = null;
  session.mic.stream.getTracks().forEach((t) => t.stop());
  session.mic.ctx.close();
  session.mic = null;
}

function onMessage(session, msg) {
  if (session.ended) return; // a session the page has given up on
  if (session.closeTimer) waitForClose(session); // the server is still finishing: wait on
  switch (msg.type) {
    case "ready":
      setStatus("live", `Live · ${msg.model}`);
      break;
    case "partial":
      ui.partial.textContent = msg.text;
      if (msg.end !== undefined) showLag(session, msg.end);
      break;
    case "final":
      addFinal(session, msg);
      ui.partial.textContent = "";
      showLag(session, msg.end);
      break;
    case "line": // the open caption line ends here (pipeline/lines.py); the next final starts a new one
      closeLine(session);
      break;
    case "translation":
      addTranslation(session, msg);
      break;
    case "language":
      ui.detected.hidden = false;
      ui.detected.dataset.language = msg.language;
      ui.detected.dataset.locked = String(msg.locked);
      ui.detected.textContent = `Detected: ${languageName(msg.language)}` + (msg.locked ? "" : " (listening…)");
      break;
    case "speech_start":
    case "speech_end":
      ui.status.dataset.speech = msg.type === "speech_start" ? "on" : "off";
      break;
    case "error":
      if (msg.fatal) session.serverError = true; // its message says why the connection closes
      showError(`${msg.message}${msg.fatal ? "" : " (the session continues)"}`);
      break;
    case "busy":
      session.serverError = true;
      showError(`${msg.message.charAt(0).toUpperCase()}${msg.message.slice(1)}.`); // max_clients, overloaded, loading, draining
      break;
    default:
      break; // stats and future message types
  }
}

function showLag(session, end) {
  const lag = session.sent / RATE - end;
  if (Number.isFinite(lag)) ui.lag.textContent = `· ${Math.max(0, lag).toFixed(1)} s behind`;
}

function openLine(session, msg) {
  const last = lines.at(-1);
  if (last && !last.closed && last.session === session) return last;
  if (last && !last.closed) endLine(last);
  const start = session.offset + msg.start;
  const p = document.createElement("p");
  p.className = "line";
  if (msg.language) p.lang = msg.language;
  const time = document.createElement("span");
  time.className = "time";
  time.textContent = fmtClock(start);
  p.append(time);
  ui.transcript.append(p);
  const line = {
    start, end: session.offset + msg.end, text: "", translations: [], el: p, after: p, closed: false, session,
  };
  lines.push(line);
  return line;
}

function addFinal(session, msg) {
  const line = openLine(session, msg);
  const span = document.createElement("span");
  span.className = "final";
  span.dataset.id = String(msg.id);
  if (msg.language) span.lang = msg.language;
  span.textContent = msg.text;
  const sep = line.text && !NO_SPACE.has(msg.language) ? " " : "";
  if (sep) line.el.append(document.createTextNode(sep));
  line.el.append(span);
  line.text += sep + msg.text; // the exports take the line's text from here: what the page shows
  line.end = session.offset + msg.end;
  session.lastEnd = Math.max(session.lastEnd, msg.end);
  finals.push({ id: msg.id, start: session.offset + msg.start, end: line.end, text: msg.text, line, session });
  ui.transcript.scrollTop = ui.transcript.scrollHeight;
}

function endLine(line) {
  line.closed = true;
  line.el.dataset.closed = "true";
}

// The server's `line` ends the open line. Its text and times are not taken: the page built the line from the same
// finals, less any that Clear took, and its times go on from the earlier sessions.
function closeLine(session) {
  const line = lines.at(-1);
  if (line && !line.closed && line.session === session) endLine(line);
}

function addTranslation(session, msg) {
  const entry = finals.findLast((f) => f.id === msg.id && f.session === session);
  if (!entry) return;
  const line = entry.line;
  line.translations.push(msg.text);
  const p = document.createElement("p");
  p.className = "translation";
  p.lang = "en";
  p.dataset.for = String(msg.id);
  p.textContent = msg.text;
  line.after.after(p);
  line.after = p;
  ui.transcript.scrollTop = ui.transcript.scrollHeight;
}

const CLOSE_REASONS = {
  1001: "the server is restarting (press Start to reconnect)", 1009: "an audio frame was too large",
  1011: "a server error", 1012: "the server is restarting or shutting down (press Start again)",
  1013: "the server is busy",
  4000: "a protocol error", 4002: "invalid settings", 4008: "no audio for too long",
  4009: "the session reached its maximum length", 4010: "the page fell behind reading captions",
};

function resetControls() {
  ui.start.textContent = "Start";
  ui.start.setAttribute("aria-pressed", "false");
  ui.start.disabled = false;
  for (const el of [ui.language, ui.task, ui.translate, ui.languages]) el.disabled = false;
}

function onClose(session, event) {
  if (session.ended) return; // handled already: Stop gave up waiting for the server
  session.ended = true;
  clearTimeout(session.closeTimer);
  releaseMic(session);
  const last = lines.at(-1);
  if (last && !last.closed && last.session === session) endLine(last); // a drop mid-line: it keeps its finals
  timeBase = Math.max(timeBase, session.offset + Math.max(session.sent / RATE, session.lastEnd));
  if (live === session) live = null;
  ui.partial.textContent = "";
  resetControls();
  if (session.closing || event.code === 1000) { // the user asked to stop: whatever the code, it stopped
    setStatus("idle", "Stopped");
  } else {
    setStatus("error", "Disconnected");
    if (session.serverError) return; // the server's busy or fatal error, on the page, says why
    const why = CLOSE_REASONS[event.code];
    if (why) showError(`The connection closed: ${why}.`);
    else if (ui.error.hidden) showError(`The connection closed unexpectedly (code ${event.code}).`);
  }
}

function lineText(line, indent) {
  return [line.text, ...line.translations.map((t) => indent + t)].join("\n");
}

function transcriptText() {
  return lines.filter((l) => l.text).map((l) => lineText(l, "  ")).join("\n");
}

function srtTime(seconds) {
  const ms = Math.round(Math.max(0, seconds) * 1000);
  const pad = (n, w = 2) => String(n).padStart(w, "0");
  return `${pad(Math.floor(ms / 3600000))}:${pad(Math.floor(ms / 60000) % 60)}:${pad(Math.floor(ms / 1000) % 60)},${pad(ms % 1000, 3)}`;
}

function transcriptSrt() { // a cue per caption line, its translations under it
  return lines.filter((l) => l.text).map((l, i) =>
    `${i + 1}\n${srtTime(l.start)} --> ${srtTime(l.end)}\n${lineText(l, "")}\n`).join("\n");
}

function download(name, text, type) {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = document.createElement("a");
  a.href = url;
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

ui.start.addEventListener("click", () => (live ? stop() : start()));
$("copy").addEventListener("click", async () => {
  try {
    await navigator.clipboard.writeText(transcriptText());
    setStatus(ui.status.dataset.state, ui.statusText.textContent.replace(/ · copied$/, "") + " · copied");
  } catch (err) {
    showError("Copying was refused by the browser; select the text and copy it by hand.");
  }
});
$("download-txt").addEventListener("click", () => download("transcript.txt", transcriptText() + "\n", "text/plain"));
$("download-srt").addEventListener("click", () => download("transcript.srt", transcriptSrt(), "application/x-subrip"));
$("clear").addEventListener("click", () => {
  finals.length = 0;
  lines.length = 0;
  ui.transcript.replaceChildren();
  ui.partial.textContent = "";
  if (!live) timeBase = 0; // the next transcript's times start at 0 again
});
document.addEventListener("keydown", (event) => {
  if (event.key === "Escape" && live) stop();
});
window.specscribe = { finals, lines, transcriptText, transcriptSrt, settings }; // for tests and the console
