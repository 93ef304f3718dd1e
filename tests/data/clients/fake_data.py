"""Tiny fake datasets on disk in the layouts the gluoncv training scripts read.

- :func:`make_voc`: ``VOC2007`` / ``VOC2012`` folders (JPEGImages, Annotations, ImageSets/Main)
  as ``gluoncv.data.VOCDetection`` reads them;
- :func:`make_image_folder`: ``train/<class>/*.jpg`` and ``val/<class>/*.jpg`` as
  ``gluoncv.data.ImageNet`` (an image folder) reads them.

Images are random noise with one or two random boxes; nothing is downloaded.
Usage: ``python fake_data.py voc ROOT`` or ``python fake_data.py imagenet ROOT``.
"""
import os
import sys

import numpy as np
from PIL import Image

VOC_NAMES = ("aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair",
             "cow", "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep",
             "sofa", "train", "tvmonitor")

_XML = """<annotation>
  <folder>{year}</folder><filename>{name}.jpg</filename>
  <size><width>{w}</width><height>{h}</height><depth>3</depth></size>
{objects}</annotation>
"""
_OBJ = """  <object><name>{cls}</name><difficult>0</difficult>
    <bndbox><xmin>{x0}</xmin><ymin>{y0}</ymin><xmax>{x1}</xmax><ymax>{y1}</ymax></bndbox>
  </object>
"""


def _image(rng, w, h, path):
    Image.fromarray(rng.randint(0, 256, size=(h, w, 3), dtype=np.uint8)).save(path, quality=90)


def make_voc(root, splits=((2007, "trainval", 4), (2012, "trainval", 4), (2007, "test", 2)),
             size=(96, 80), seed=0):
    """Write a tiny Pascal VOC tree under ``root``; return ``root``.

    Parameters
    ----------
    root : str
        The folder that ``VOCDetection(root=...)`` gets (holding ``VOC2007``, ``VOC2012``).
    splits : sequence of (int, str, int)
        (year, split name, number of images).
    size : (int, int)
        Image width and height.
    seed : int
    """
    rng = np.random.RandomState(seed)
    w, h = size
    for year, split, count in splits:
        base = os.path.join(root, "VOC%d" % year)
        for sub in ("JPEGImages", "Annotations", os.path.join("ImageSets", "Main")):
            os.makedirs(os.path.join(base, sub), exist_ok=True)
        names = ["%s_%06d" % (split, n) for n in range(count)]
        for name in names:
            _image(rng, w, h, os.path.join(base, "JPEGImages", name + ".jpg"))
            objects = ""
            for _ in range(1 + rng.randint(2)):
                x0, y0 = rng.randint(1, w // 2), rng.randint(1, h // 2)
                x1, y1 = rng.randint(x0 + 8, w), rng.randint(y0 + 8, h)
                objects += _OBJ.format(cls=VOC_NAMES[rng.randint(len(VOC_NAMES))],
                                       x0=x0, y0=y0, x1=x1, y1=y1)
            with open(os.path.join(base, "Annotations", name + ".xml"), "w") as handle:
                handle.write(_XML.format(year=year, name=name, w=w, h=h, objects=objects))
        with open(os.path.join(base, "ImageSets", "Main", split + ".txt"), "a") as handle:
            handle.write("".join(n + "\n" for n in names))
    return root


def make_image_folder(root, classes=4, per_class=(2, 1), size=(48, 48), seed=0):
    """Write ``root/train/<class>/*.jpg`` and ``root/val/<class>/*.jpg``; return ``root``.

    Parameters
    ----------
    root : str
    classes : int
        Number of class folders (``n00000000`` ...).
    per_class : (int, int)
        Images per class in train and in val.
    size : (int, int)
    seed : int
    """
    rng = np.random.RandomState(seed)
    for split, count in zip(("train", "val"), per_class):
        for c in range(classes):
            folder = os.path.join(root, split, "n%08d" % c)
            os.makedirs(folder, exist_ok=True)
            for n in range(count):
                _image(rng, size[0], size[1], os.path.join(folder, "%d.jpg" % n))
    return root


if __name__ == "__main__":
    kind, target = sys.argv[1], sys.argv[2]
    (make_voc if kind == "voc" else make_image_folder)(target)
    print(target)
