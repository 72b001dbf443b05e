// A picture (PNG, JPEG: a File or Blob) as an image model's input: decoded by the browser,
// center-cropped to the model's aspect ratio, scaled to its H x W, and written as float32 RGB
// in its layout (NCHW or NHWC) with a chosen normalization. No colour-space conversion, no
// premultiplied alpha, so the RGB bytes are the file's own (alpha is dropped).

// normalization name -> (value in [0, 255], channel) -> float
const IMAGENET_MEAN = [0.485, 0.456, 0.406];
const IMAGENET_STD = [0.229, 0.224, 0.225];
export const NORMALIZATIONS = {
  imagenet: (v, c) => (v / 255 - IMAGENET_MEAN[c]) / IMAGENET_STD[c],
  unit: (v) => v / 255,
  signed: (v) => v / 127.5 - 1,
};

// The centred crop of a w x h picture with the aspect ratio of width x height.
export function centerCrop(w, h, width, height) {
  const scale = Math.min(w / width, h / height);
  const cw = width * scale;
  const ch = height * scale;
  return { sx: (w - cw) / 2, sy: (h - ch) / 2, sw: cw, sh: ch };
}

async function decode(file) {
  try {
    return await createImageBitmap(file, { colorSpaceConversion: 'none',
      premultiplyAlpha: 'none' });
  } catch (error) {
    throw { type: 'ImageError', message: `${file.name || 'the picture'} could not be decoded ` +
      `as an image (${error.message || error}): open a PNG or JPEG file` };
  }
}

// RGBA bytes of the picture, cropped and scaled to width x height.
async function pixels(file, width, height) {
  const bitmap = await decode(file);
  try {
    const canvas = new OffscreenCanvas(width, height);
    const ctx = canvas.getContext('2d');
    ctx.imageSmoothingQuality = 'high';
    const { sx, sy, sw, sh } = centerCrop(bitmap.width, bitmap.height, width, height);
    ctx.drawImage(bitmap, sx, sy, sw, sh, 0, 0, width, height);
    return { rgba: ctx.getImageData(0, 0, width, height).data, size: [bitmap.width,
      bitmap.height] };
  } finally {
    bitmap.close();
  }
}

// image: {layout: 'NCHW' | 'NHWC', height, width} (web_api.image_input) -> {bytes: the float32
// input as a Uint8Array, size: [picture width, height]}.
export async function pictureInput(file, image, normalization) {
  const norm = NORMALIZATIONS[normalization];
  if (!norm) throw { type: 'ValueError', message: `unknown normalization ${normalization}` };
  const { height, width, layout } = image;
  const { rgba, size } = await pixels(file, width, height);
  const out = new Float32Array(3 * height * width);
  const plane = height * width;
  for (let p = 0; p < plane; p += 1) {
    for (let c = 0; c < 3; c += 1) {
      const at = layout === 'NCHW' ? c * plane + p : p * 3 + c;
      out[at] = norm(rgba[4 * p + c], c);
    }
  }
  return { bytes: new Uint8Array(out.buffer), size };
}
