// AudioWorklet: microphone -> mono -> 16 kHz -> PCM16 chunks posted to the page.
//
// When the AudioContext already runs at 16 kHz (the page asks for that first), samples pass
// straight through. Otherwise a windowed-sinc low-pass resampler converts the context rate
// (44.1 / 48 kHz ...) to 16 kHz, so nothing above 8 kHz aliases into the speech band.

const TAU = 2 * Math.PI;

class PcmCapture extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const opts = (options && options.processorOptions) || {};
    this.target = opts.targetRate || 16000;
    this.ratio = sampleRate / this.target; // input samples per output sample
    this.chunk = opts.chunkSamples || 1600; // 100 ms at 16 kHz
    this.out = new Int16Array(this.chunk);
    this.n = 0;
    this.fc = Math.min(1, 1 / this.ratio) * 0.92; // cut-off, as a fraction of the input Nyquist
    this.half = Math.ceil(8 / this.fc); // kernel half-width in input samples (8 zero crossings)
    this.buf = new Float32Array(0); // recent input; buf[0] is absolute input index bufStart
    this.bufStart = 0;
    this.t = 0; // absolute input position of the next output sample
    this.port.onmessage = (event) => {
      if (event.data === "flush") this.flush();
    };
  }

  kernel(d) {
    // low-pass sinc at fc, Blackman window over |d| < half
    const x = d * this.fc;
    const sinc = x === 0 ? 1 : Math.sin(Math.PI * x) / (Math.PI * x);
    const w = 0.42 + 0.5 * Math.cos((TAU * d) / (2 * this.half)) + 0.08 * Math.cos((2 * TAU * d) / (2 * this.half));
    return this.fc * sinc * w;
  }

  push(value) {
    const v = Math.max(-1, Math.min(1, value));
    this.out[this.n++] = v < 0 ? Math.round(v * 32768) : Math.round(v * 32767);
    if (this.n === this.chunk) this.flush();
  }

  flush() {
    if (this.n === 0) return;
    const chunk = this.out.slice(0, this.n);
    this.port.postMessage(chunk, [chunk.buffer]);
    this.n = 0;
  }

  process(inputs) {
    const input = inputs[0];
    if (!input || input.length === 0 || input[0].length === 0) return true;
    const frames = input[0].length;
    const mono = new Float32Array(frames);
    for (let c = 0; c < input.length; c++) {
      const ch = input[c];
      for (let i = 0; i < frames; i++) mono[i] += ch[i] / input.length;
    }
    if (Math.abs(this.ratio - 1) < 1e-9) {
      for (let i = 0; i < frames; i++) this.push(mono[i]);
      return true;
    }
    const joined = new Float32Array(this.buf.length + frames);
    joined.set(this.buf);
    joined.set(mono, this.buf.length);
    this.buf = joined;
    const end = this.bufStart + this.buf.length; // absolute index after the last input sample
    while (this.t + this.half < end) {
      const centre = Math.floor(this.t);
      let acc = 0;
      for (let j = centre - this.half + 1; j <= centre + this.half; j++) {
        if (j >= this.bufStart) acc += this.buf[j - this.bufStart] * this.kernel(this.t - j);
      }
      this.push(acc);
      this.t += this.ratio;
    }
    const keepFrom = Math.floor(this.t) - this.half;
    if (keepFrom > this.bufStart) {
      this.buf = this.buf.slice(keepFrom - this.bufStart);
      this.bufStart = keepFrom;
    }
    return true;
  }
}

registerProcessor("pcm-capture", PcmCapture);
