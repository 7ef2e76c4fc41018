// A bar chart of a window's series, drawn on a canvas that fills its box.
//
// The canvas backing store is the box's size times devicePixelRatio, so bars
// and lines stay crisp on HiDPI screens; bar edges are snapped to device
// pixels. Colours come from the box's CSS custom properties (--accent,
// --grid, --muted), so the chart follows the page's light or dark scheme.
// Values are drawn per second (bucket count / resolution), the unit of the
// rate next to it. The newest bucket is still filling, so it is drawn
// lighter rather than looking like a drop.

export class Chart {
  constructor(box, { label = 'Messages' } = {}) {
    this.box = box;
    this.label = label;
    this.series = [];
    this.resolution = 1; // seconds per bucket
    this.asOf = 0; // ms
    this.hover = -1;
    this.canvas = document.createElement('canvas');
    this.canvas.setAttribute('role', 'img');
    this.tip = document.createElement('div');
    this.tip.className = 'chart-tip';
    this.tip.hidden = true;
    box.append(this.canvas, this.tip);
    this.ctx = this.canvas.getContext('2d');
    new ResizeObserver(() => this.resize()).observe(box);
    matchMedia('(prefers-color-scheme: dark)').addEventListener('change', () => this.draw());
    this.canvas.addEventListener('pointermove', (e) => this.pointer(e));
    this.canvas.addEventListener('pointerleave', () => { this.hover = -1; this.draw(); });
    this.resize();
  }

  // set shows a series of bucket counts, oldest first.
  set(series, resolution, asOf) {
    this.series = series || [];
    this.resolution = resolution > 0 ? resolution : 1;
    this.asOf = asOf || 0;
    this.draw();
  }

  resize() {
    const w = Math.max(1, Math.round(this.box.clientWidth));
    const h = Math.max(1, Math.round(this.box.clientHeight));
    const dpr = window.devicePixelRatio || 1;
    if (w === this.w && h === this.h && dpr === this.dpr) return;
    this.w = w;
    this.h = h;
    this.dpr = dpr;
    this.canvas.width = Math.round(w * dpr);
    this.canvas.height = Math.round(h * dpr);
    this.draw();
  }

  // geometry lays the chart out; its labels follow the page's font size,
  // which grows on large screens.
  geometry() {
    const fs = Math.round(0.74 * parseFloat(getComputedStyle(document.documentElement).fontSize) || 11);
    const pad = { left: Math.round(fs * 4), right: 8, top: Math.round(fs * 1.1), bottom: Math.round(fs * 2.2) };
    const n = this.series.length;
    const pw = Math.max(1, this.w - pad.left - pad.right);
    const ph = Math.max(1, this.h - pad.top - pad.bottom);
    return { n, pw, ph, slot: n ? pw / n : pw, pad, fs };
  }

  pointer(e) {
    const { n, slot, pad } = this.geometry();
    const r = this.canvas.getBoundingClientRect();
    const i = Math.floor((e.clientX - r.left - pad.left) / slot);
    const hover = n && i >= 0 && i < n ? i : -1;
    if (hover !== this.hover) {
      this.hover = hover;
      this.draw();
    }
  }

  draw() {
    const { ctx, w, h, dpr } = this;
    if (!w || !h) return;
    const css = getComputedStyle(this.box);
    const color = (name, fallback) => css.getPropertyValue(name).trim() || fallback;
    const accent = color('--accent', '#4fd1c5');
    const grid = color('--grid', 'rgba(128,128,128,.2)');
    const muted = color('--muted', '#8a94a6');
    const font = css.fontFamily || 'system-ui, sans-serif';

    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, h);
    const g = this.geometry();
    const { n, pw, ph, slot, pad } = g;
    const res = this.resolution;
    const vals = this.series.map((v) => v / res);
    const peak = vals.reduce((m, v) => Math.max(m, v), 0);
    const top = niceCeil(peak);
    const px = (x) => Math.round(x * dpr) / dpr; // snap to device pixels
    const baseY = pad.top + ph;

    // Grid: baseline, half and top, labelled in msg/s.
    ctx.font = `${g.fs}px ${font}`;
    ctx.textAlign = 'right';
    ctx.textBaseline = 'middle';
    ctx.lineWidth = 1 / dpr;
    for (const f of [0, 0.5, 1]) {
      const y = px(baseY - f * ph) + 0.5 / dpr;
      ctx.strokeStyle = grid;
      ctx.beginPath();
      ctx.moveTo(pad.left, y);
      ctx.lineTo(pad.left + pw, y);
      ctx.stroke();
      ctx.fillStyle = muted;
      ctx.fillText(fmtAxis(top * f), pad.left - 8, y);
    }

    // Bars, or an area when there are too many buckets for bars.
    if (n > 0) {
      const gap = slot >= 6 ? Math.min(3, slot * 0.22) : slot >= 3 ? 1 : 0;
      const grad = ctx.createLinearGradient(0, pad.top, 0, baseY);
      grad.addColorStop(0, accent);
      grad.addColorStop(1, withAlpha(accent, 0.45));
      if (slot >= 2) {
        for (let i = 0; i < n; i++) {
          const v = vals[i];
          if (v <= 0) continue;
          const x0 = px(pad.left + i * slot + gap / 2);
          const x1 = px(pad.left + (i + 1) * slot - gap / 2);
          const bh = Math.max(1 / dpr, px((v / top) * ph));
          ctx.globalAlpha = i === n - 1 ? 0.45 : this.hover >= 0 && this.hover !== i ? 0.7 : 1;
          ctx.fillStyle = grad;
          roundTop(ctx, x0, baseY - bh, Math.max(1 / dpr, x1 - x0), bh, Math.min(3, (x1 - x0) / 2));
          ctx.fill();
        }
        ctx.globalAlpha = 1;
      } else {
        ctx.beginPath();
        ctx.moveTo(pad.left, baseY);
        for (let i = 0; i < n; i++) ctx.lineTo(pad.left + (i + 0.5) * slot, baseY - (vals[i] / top) * ph);
        ctx.lineTo(pad.left + pw, baseY);
        ctx.closePath();
        ctx.fillStyle = withAlpha(accent, 0.35);
        ctx.fill();
        ctx.beginPath();
        for (let i = 0; i < n; i++) ctx.lineTo(pad.left + (i + 0.5) * slot, baseY - (vals[i] / top) * ph);
        ctx.strokeStyle = accent;
        ctx.lineWidth = 1.5;
        ctx.stroke();
      }
    }

    // Time axis: the window's start, its middle, and now.
    const span = n * res;
    ctx.fillStyle = muted;
    ctx.textBaseline = 'top';
    const ly = baseY + Math.round(g.fs * 0.6);
    ctx.textAlign = 'left';
    ctx.fillText(span ? `−${fmtSpan(span)}` : '', pad.left, ly);
    ctx.textAlign = 'center';
    if (span) ctx.fillText(`−${fmtSpan(span / 2)}`, pad.left + pw / 2, ly);
    ctx.textAlign = 'right';
    ctx.fillText('now', pad.left + pw, ly);

    this.canvas.setAttribute('aria-label',
      `${this.label} per second over the last ${fmtSpan(span)}: peak ${fmtAxis(peak)}, now ${fmtAxis(vals.at(-2) ?? 0)}`);
    this.showTip(vals, slot, pad);
  }

  showTip(vals, slot, pad) {
    const i = this.hover;
    if (i < 0 || i >= vals.length) {
      this.tip.hidden = true;
      return;
    }
    const resMs = this.resolution * 1000;
    const start = (Math.floor(this.asOf / resMs) - vals.length + 1 + i) * resMs;
    const count = this.series[i];
    const when = this.asOf ? timeFmt.format(new Date(start)) : '';
    const rate = this.resolution === 1 ? '' : ` · ${fmtAxis(vals[i])}/s`;
    this.tip.textContent = `${when}  ${count.toLocaleString()} msg${count === 1 ? '' : 's'}${rate}${i === vals.length - 1 ? ' (so far)' : ''}`;
    this.tip.hidden = false;
    const tw = this.tip.offsetWidth;
    const x = pad.left + (i + 0.5) * slot - tw / 2;
    this.tip.style.left = `${Math.max(0, Math.min(this.w - tw, x))}px`;
  }
}

const timeFmt = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit', hourCycle: 'h23' });

// niceCeil rounds v up to 1, 2, 2.5 or 5 times a power of ten (1 for 0).
function niceCeil(v) {
  if (!(v > 0)) return 1;
  const e = 10 ** Math.floor(Math.log10(v));
  const f = v / e;
  const m = f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10;
  return m * e;
}

function fmtAxis(v) {
  if (v === 0) return '0';
  if (v >= 1000) return axisBig.format(v);
  return axisSmall.format(v);
}
const axisBig = new Intl.NumberFormat(undefined, { notation: 'compact', maximumFractionDigits: 1 });
const axisSmall = new Intl.NumberFormat(undefined, { maximumFractionDigits: 2 });

// fmtSpan writes a duration in seconds as its largest whole unit: 90s, 5m, 1h, 7d.
export function fmtSpan(s) {
  if (s >= 86400 && s % 86400 === 0) return `${s / 86400}d`;
  if (s >= 3600 && s % 3600 === 0) return `${s / 3600}h`;
  if (s >= 60 && s % 60 === 0) return `${s / 60}m`;
  return `${+s.toFixed(1)}s`;
}

function roundTop(ctx, x, y, w, h, r) {
  r = Math.max(0, Math.min(r, h));
  ctx.beginPath();
  ctx.moveTo(x, y + h);
  ctx.lineTo(x, y + r);
  ctx.arcTo(x, y, x + r, y, r);
  ctx.lineTo(x + w - r, y);
  ctx.arcTo(x + w, y, x + w, y + r, r);
  ctx.lineTo(x + w, y + h);
  ctx.closePath();
}

// withAlpha gives a #rgb or #rrggbb colour an alpha; other forms pass as they are.
function withAlpha(c, a) {
  let m = /^#([0-9a-f]{3})$/i.exec(c);
  if (m) c = '#' + [...m[1]].map((x) => x + x).join('');
  m = /^#([0-9a-f]{2})([0-9a-f]{2})([0-9a-f]{2})$/i.exec(c);
  if (!m) return c;
  const [r, g, b] = m.slice(1).map((x) => parseInt(x, 16));
  return `rgba(${r}, ${g}, ${b}, ${a})`;
}
