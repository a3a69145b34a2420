"""The seam's colour correction (respec/pixels/seam.py): one normalised convolution, bounded, for
Reveal Composite's seam and the Drift Guard's feather seam."""
from __future__ import annotations

import numpy as np
from scipy import ndimage

from respec.pixels.seam import SPREAD_CLIP, spread_difference


def _blur(x):
    return ndimage.gaussian_filter(x, 3.0)


def test_a_difference_known_on_a_band_is_carried_to_its_neighbourhood():
    diff = np.full((40, 40, 3), 0.05, np.float32)
    band = np.zeros((40, 40), bool)
    band[:, :4] = True
    corr = spread_difference(diff, band, _blur)
    assert np.allclose(corr[:, :10], 0.05, atol=1e-6)      # a constant difference is carried as it is


def test_the_correction_is_bounded():
    diff = np.full((32, 32, 3), 0.5, np.float32)
    corr = spread_difference(diff, np.ones((32, 32), bool), _blur)
    assert np.allclose(corr, SPREAD_CLIP)


def test_no_band_pixel_near_means_no_correction():
    diff = np.full((64, 64, 3), 0.05, np.float32)
    band = np.zeros((64, 64), bool)
    band[:2, :2] = True
    assert spread_difference(diff, band, lambda x: ndimage.gaussian_filter(x, 1.0))[60, 60].max() == 0.0
