// as2d's page: live dictation over the realtime socket, file transcription, questions.
// Plain JavaScript, no build step, nothing loaded from anywhere but this server.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { key: sessionStorage.getItem("as2d-key") || "", llm: null, file: null,
                segments: null, ws: null, ctx: null, stream: null, items: new Map(),
                order: [] };

function authHeaders() {
  return state.key ? { Authorization: "Bearer " + state.key } : {};
}

function needKey() {
  $("keybox").classList.remove("hidden");
  $("key").focus();
}

$("key").value = state.key;
$("key").addEventListener("change", () => {
  state.key = $("key").value.trim();
  sessionStorage.setItem("as2d-key", state.key);
  poll();
});

// -- server state ------------------------------------------------------------------------
async function poll() {
  const pill = $("status");
  try {
    const r = await fetch("/health");
    const h = await r.json();
    pill.textContent = h.status === "ok" ? "ready" : h.status;
    pill.className = "pill " + (h.status === "ok" ? "ok" : h.status === "loading" ? "loading" : "down");
    $("models").textContent = h.model + (h.drafter ? " + " + h.drafter : "") + " · " + h.decoder +
      (h.llm ? " · " + h.llm : "");
    state.llm = h.llm;
    $("ask").classList.toggle("hidden", !h.llm);
    if (h.status === "loading") setTimeout(poll, 1000);
  } catch (e) {
    pill.textContent = "offline";
    pill.className = "pill down";
    setTimeout(poll, 3000);
  }
}
poll();

// -- live dictation ----------------------------------------------------------------------
function item(id) {
  let it = state.items.get(id);
  if (!it) {
    const el = document.createElement("span");
    el.className = "utt";
    const done = document.createElement("span");
    const open = document.createElement("span");
    open.className = "open";
    el.append(done, open);
    $("transcript").append(el);
    it = { el, done, open, text: "" };
    state.items.set(id, it);
    state.order.push(id);
  }
  return it;
}

function onEvent(e) {
  switch (e.type) {
    case "input_audio_buffer.speech_started":
      $("live-state").textContent = "speech";
      item(e.item_id);
      break;
    case "input_audio_buffer.speech_stopped":
      $("live-state").textContent = "end of speech: finishing the utterance";
      break;
    case "conversation.item.input_audio_transcription.delta": {
      const it = item(e.item_id);
      it.text += e.delta;
      it.done.textContent = it.text;
      $("live-download").disabled = false;
      break;
    }
    case "conversation.item.input_audio_transcription.completed": {
      const it = item(e.item_id);
      it.text = e.transcript;
      it.done.textContent = e.transcript;
      it.open.textContent = "";
      $("tentative").textContent = "";
      $("live-state").textContent = state.ws ? "listening" : "idle";
      break;
    }
    case "as2d.hypothesis": {
      const it = item(e.item_id);
      it.open.textContent = e.tentative ? " " + e.tentative : "";
      $("tentative").textContent = e.tentative || "";
      $("decode").textContent = `${e.final ? "final" : "growing"} decode of ${e.audio_seconds.toFixed(1)} s: ` +
        `${e.tokens} tokens in ${(e.decode_seconds * 1000).toFixed(0)} ms` + (e.reused ? " (reused)" : "");
      break;
    }
    case "as2d.level":
      $("level").style.width = Math.max(0, Math.min(100, (e.level_db + 70) * 1.6)) + "%";
      break;
    case "as2d.note":
      $("live-state").textContent = e.message;
      break;
    case "error":
      $("live-state").textContent = "error: " + e.error.message;
      break;
  }
}

function pcm16(float32) {
  const out = new Int16Array(float32.length);
  for (let i = 0; i < float32.length; i++) {
    const s = Math.max(-1, Math.min(1, float32[i]));
    out[i] = s < 0 ? s * 0x8000 : s * 0x7fff;
  }
  return out;
}

function base64(bytes) {
  let s = "";
  const u8 = new Uint8Array(bytes.buffer);
  for (let i = 0; i < u8.length; i += 0x8000) s += String.fromCharCode.apply(null, u8.subarray(i, i + 0x8000));
  return btoa(s);
}

async function startRecording() {
  const rate = 16000;
  state.stream = await navigator.mediaDevices.getUserMedia({ audio: { channelCount: 1,
    echoCancellation: false, noiseSuppression: false, autoGainControl: false } });
  state.ctx = new AudioContext({ sampleRate: rate });
  await state.ctx.audioWorklet.addModule("/pcm-worklet.js");
  const src = state.ctx.createMediaStreamSource(state.stream);
  const tap = new AudioWorkletNode(state.ctx, "pcm-tap");
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  const protocols = ["realtime"];
  if (state.key) protocols.push("openai-insecure-api-key." + state.key);
  const ws = new WebSocket(`${proto}//${location.host}/v1/realtime?intent=transcription&hypotheses=1`, protocols);
  state.ws = ws;
  let opened = false;
  ws.onopen = () => {
    opened = true;
    ws.send(JSON.stringify({ type: "session.update", session: { type: "transcription",
      audio: { input: { format: { type: "audio/pcm", rate: state.ctx.sampleRate } } } } }));
    tap.port.onmessage = (m) => {
      if (ws.readyState === WebSocket.OPEN) {
        ws.send(JSON.stringify({ type: "input_audio_buffer.append", audio: base64(pcm16(m.data)) }));
      }
    };
    src.connect(tap);
    $("live-state").textContent = "listening";
  };
  ws.onmessage = (m) => onEvent(JSON.parse(m.data));
  ws.onclose = (c) => {
    if (c.code === 1008 || (c.code === 1006 && !opened)) needKey();  // refused: a key is needed
    if (state.ws === ws) stopRecording(false);
    $("live-state").textContent = c.code === 1000 || c.code === 1005 ? "idle" : `closed (${c.code} ${c.reason || ""})`;
  };
  $("record").textContent = "Stop";
  $("record").classList.add("recording");
}

function stopRecording(finish = true) {
  const ws = state.ws;
  if (finish && ws && ws.readyState === WebSocket.OPEN) {
    ws.send(JSON.stringify({ type: "input_audio_buffer.end" }));  // the server finishes, then closes
    $("live-state").textContent = "finishing the last utterance";
  }
  state.ws = null;
  if (state.stream) state.stream.getTracks().forEach((t) => t.stop());
  if (state.ctx) state.ctx.close();
  state.stream = state.ctx = null;
  $("record").textContent = "Start recording";
  $("record").classList.remove("recording");
  $("level").style.width = "0";
}

$("record").addEventListener("click", () => {
  if (state.ws) stopRecording();
  else startRecording().catch((e) => { $("live-state").textContent = "cannot record: " + e.message; stopRecording(false); });
});

$("live-download").addEventListener("click", () => {
  const text = state.order.map((id) => state.items.get(id).text.trim()).filter(Boolean).join("\n") + "\n";
  download("dictation.txt", text, "text/plain");
});

// -- files -------------------------------------------------------------------------------
const drop = $("drop");
["dragenter", "dragover"].forEach((t) => drop.addEventListener(t, (e) => { e.preventDefault(); drop.classList.add("over"); }));
["dragleave", "drop"].forEach((t) => drop.addEventListener(t, (e) => { e.preventDefault(); drop.classList.remove("over"); }));
drop.addEventListener("drop", (e) => { if (e.dataTransfer.files.length) transcribeFile(e.dataTransfer.files[0]); });
$("picker").addEventListener("change", (e) => { if (e.target.files.length) transcribeFile(e.target.files[0]); });
// Speakers asked for (or no longer) after a file was transcribed: that file again.
$("speakers").addEventListener("change", () => { if (state.file) transcribeFile(state.file); });

function stamp(seconds, marker, hours) {
  let ms = Math.round(Math.max(0, seconds) * 1000);
  const h = Math.floor(ms / 3600000); ms -= h * 3600000;
  const m = Math.floor(ms / 60000); ms -= m * 60000;
  const s = Math.floor(ms / 1000); ms -= s * 1000;
  const p = (n, w) => String(n).padStart(w, "0");
  return (hours || h > 0 ? p(h, 2) + ":" : "") + p(m, 2) + ":" + p(s, 2) + marker + p(ms, 3);
}

// The same documents as2d's writers produce (as `as2d transcribe -f txt|srt|vtt`), with
// the speaker when the file was diarized: `[A]: ` before a txt or srt line, a WebVTT voice span.
const said = (s) => (s.speaker ? `[${s.speaker}]: ` : "");
const writers = {
  txt: (segs) => segs.map((s) => said(s) + s.text.trim() + "\n").join(""),
  srt: (segs) => segs.map((s, i) => `${i + 1}\n${stamp(s.start, ",", true)} --> ${stamp(s.end, ",", true)}\n` +
    `${said(s)}${s.text.trim().replaceAll("-->", "->")}\n\n`).join(""),
  vtt: (segs) => "WEBVTT\n\n" + segs.map((s) => `${stamp(s.start, ".", false)} --> ${stamp(s.end, ".", false)}\n` +
    `${s.speaker ? `<v ${s.speaker}>` : ""}${s.text.trim().replaceAll("-->", "->")}\n\n`).join(""),
};

// Each speaker's colour: one of style.css's eight (.spk-0 ... .spk-7), in order of first
// speech; the label is written too, so the colour is never the only cue.
const PALETTE = 8;
function speakerColours(segs) {
  const colours = new Map();
  for (const s of segs) {
    if (s.speaker && !colours.has(s.speaker)) colours.set(s.speaker, "spk-" + (colours.size % PALETTE));
  }
  return colours;
}

function download(name, text, type) {
  const a = document.createElement("a");
  a.href = URL.createObjectURL(new Blob([text], { type }));
  a.download = name;
  a.click();
  setTimeout(() => URL.revokeObjectURL(a.href), 1000);
}

document.querySelectorAll("button.dl").forEach((b) => b.addEventListener("click", () => {
  const f = b.dataset.format;
  const stem = (state.file ? state.file.name : "audio").replace(/\.[^.]*$/, "");
  download(`${stem}.${f}`, writers[f](state.segments || []), "text/plain");
}));

async function transcribeFile(file) {
  state.file = file;
  state.segments = null;
  $("segments").textContent = "";
  $("file-state").textContent = `transcribing ${file.name}…`;
  document.querySelectorAll("button.dl").forEach((b) => { b.disabled = true; });
  const form = new FormData();
  form.append("file", file);
  form.append("model", "whisper-1");
  const diarize = $("speakers").checked;  // OpenAI's diarized_json: segments with a speaker
  form.append("response_format", diarize ? "diarized_json" : "verbose_json");
  const t0 = performance.now();
  const r = await fetch("/v1/audio/transcriptions", { method: "POST", body: form, headers: authHeaders() });
  const doc = await r.json();
  if (!r.ok) {
    if (r.status === 401) needKey();
    $("file-state").textContent = "error: " + doc.error.message;
    return;
  }
  state.segments = doc.segments;
  const colours = speakerColours(doc.segments);
  $("file-state").textContent = (doc.language ? doc.language + ", " : "") +
    `${doc.duration.toFixed(1)} s of audio in ${((performance.now() - t0) / 1000).toFixed(2)} s` +
    (diarize ? `, ${colours.size} speaker${colours.size === 1 ? "" : "s"}` : "");
  for (const s of doc.segments) {
    const line = document.createElement("div");
    const t = document.createElement("span");
    t.className = "t";
    t.textContent = stamp(s.start, ".", false);
    line.append(t);
    if (s.speaker) {
      line.className = "said " + colours.get(s.speaker);
      const who = document.createElement("span");
      who.className = "who";
      who.textContent = s.speaker;
      line.append(who);
    }
    line.append(document.createTextNode(s.text.trim()));
    $("segments").append(line);
  }
  document.querySelectorAll("button.dl").forEach((b) => { b.disabled = false; });
  $("ask-button").disabled = false;
}

// -- questions ---------------------------------------------------------------------------
$("ask-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const q = $("question").value.trim();
  if (!q || !state.file) return;
  $("answer").textContent = "thinking…";
  const form = new FormData();
  form.append("file", state.file);
  form.append("question", q);
  const r = await fetch("/v1/audio/ask", { method: "POST", body: form, headers: authHeaders() });
  const doc = await r.json();
  if (!r.ok) {
    $("answer").textContent = "error: " + doc.error.message;
    return;
  }
  $("answer").textContent = "";
  const a = document.createElement("div");
  a.textContent = doc.answer;
  $("answer").append(a);
  for (const s of doc.evidence || []) {  // the passages the answer rests on, best first
    const ev = document.createElement("div");
    ev.className = "evidence";
    ev.textContent = `${stamp(s.start, ".", false)}  ${s.speaker ? s.speaker + ": " : ""}${s.text}`;
    $("answer").append(ev);
  }
});
