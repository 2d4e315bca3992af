import { GLYPH_HEIGHT, GLYPH_WIDTH, glyph } from './font';
import { encodePng } from './png';

/** An RGB colour, 0–255 per channel. */
export type Rgb = readonly [number, number, number];

/** A pixel buffer with the few drawing primitives a chart needs (no anti-aliasing). */
export class Raster {
  readonly pixels: Uint8Array;

  constructor(readonly width: number, readonly height: number, background: Rgb = [255, 255, 255]) {
    this.pixels = new Uint8Array(width * height * 4);
    this.fillRect(0, 0, width, height, background);
  }

  setPixel(x: number, y: number, [r, g, b]: Rgb): void {
    const px = Math.round(x);
    const py = Math.round(y);
    if (px < 0 || py < 0 || px >= this.width || py >= this.height) return;
    const i = (py * this.width + px) * 4;
    this.pixels[i] = r;
    this.pixels[i + 1] = g;
    this.pixels[i + 2] = b;
    this.pixels[i + 3] = 255;
  }

  fillRect(x: number, y: number, w: number, h: number, colour: Rgb): void {
    const x0 = Math.max(0, Math.round(x));
    const y0 = Math.max(0, Math.round(y));
    const x1 = Math.min(this.width, Math.round(x + w));
    const y1 = Math.min(this.height, Math.round(y + h));
    for (let py = y0; py < y1; py++) for (let px = x0; px < x1; px++) this.setPixel(px, py, colour);
  }

  strokeRect(x: number, y: number, w: number, h: number, colour: Rgb): void {
    this.line(x, y, x + w, y, colour);
    this.line(x + w, y, x + w, y + h, colour);
    this.line(x + w, y + h, x, y + h, colour);
    this.line(x, y + h, x, y, colour);
  }

  /** A line `thickness` pixels wide; `dash` draws `dash` pixels on, `dash` off. */
  line(x0: number, y0: number, x1: number, y1: number, colour: Rgb, thickness = 1, dash = 0): void {
    const steps = Math.max(Math.abs(x1 - x0), Math.abs(y1 - y0), 1);
    const half = (thickness - 1) / 2;
    for (let s = 0; s <= steps; s++) {
      if (dash > 0 && Math.floor(s / dash) % 2 === 1) continue;
      const x = x0 + ((x1 - x0) * s) / steps;
      const y = y0 + ((y1 - y0) * s) / steps;
      for (let dx = -half; dx <= half; dx++) for (let dy = -half; dy <= half; dy++) this.setPixel(x + dx, y + dy, colour);
    }
  }

  /** A filled square marker centred on (x, y). */
  marker(x: number, y: number, size: number, colour: Rgb): void {
    this.fillRect(x - size / 2, y - size / 2, size, size, colour);
  }

  static textWidth(text: string, scale = 1): number {
    return [...text].length * (GLYPH_WIDTH + 1) * scale - scale;
  }

  static textHeight(scale = 1): number {
    return GLYPH_HEIGHT * scale;
  }

  /** Draws `text` with its top-left corner at (x, y); `align` moves the anchor to the centre or right edge. */
  text(x: number, y: number, text: string, colour: Rgb, scale = 1, align: 'left' | 'center' | 'right' = 'left'): void {
    const width = Raster.textWidth(text, scale);
    let cx = align === 'left' ? x : align === 'center' ? x - width / 2 : x - width;
    for (const char of text) {
      const rows = glyph(char);
      rows.forEach((bits, row) => {
        for (let col = 0; col < GLYPH_WIDTH; col++) {
          if (bits & (1 << (GLYPH_WIDTH - 1 - col))) this.fillRect(cx + col * scale, y + row * scale, scale, scale, colour);
        }
      });
      cx += (GLYPH_WIDTH + 1) * scale;
    }
  }

  /** Text rotated a quarter turn anticlockwise (for a y-axis title), centred on (x, y). */
  verticalText(x: number, y: number, text: string, colour: Rgb, scale = 1): void {
    const width = Raster.textWidth(text, scale);
    let cy = y + width / 2;
    for (const char of text) {
      const rows = glyph(char);
      rows.forEach((bits, row) => {
        for (let col = 0; col < GLYPH_WIDTH; col++) {
          if (bits & (1 << (GLYPH_WIDTH - 1 - col))) this.fillRect(x + row * scale, cy - (col + 1) * scale, scale, scale, colour);
        }
      });
      cy -= (GLYPH_WIDTH + 1) * scale;
    }
  }

  toPng(): Buffer {
    return encodePng(this.width, this.height, this.pixels);
  }
}
