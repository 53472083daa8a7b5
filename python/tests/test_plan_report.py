"""`kiwi plan --report`: the page renders in a browser. A headless Chromium (Debian's `chromium`, which
scripts/test.sh installs) screenshots it, and the screenshot must show each figure in its place: the
pipeline timeline's passes, the memory bars, the layers' strategies, in that order down the page."""
import os
import re
import shutil
import subprocess

import pytest

import kiwi

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
WIDTH, HEIGHT = 1240, 3400


def _rgb(color: str):
    return tuple(int(color[i:i + 2], 16) for i in (1, 3, 5))


def _fill(html: str, title: str) -> str:
    """The fill of the first SVG rect whose tooltip starts with `title` (a legend swatch or a cell)."""
    match = re.search(r'fill="(#[0-9a-f]{6})"><title>' + re.escape(title), html)
    assert match, f"no figure element titled {title!r}"
    return match.group(1)


def _screenshot(page, shot):
    if CHROMIUM is None:
        if os.environ.get("KIWI_REQUIRE_CHROMIUM") == "1":
            pytest.fail("chromium is missing: bash scripts/apt_install.sh test chromium")
        pytest.skip("no chromium (bash scripts/apt_install.sh test chromium)")
    subprocess.run([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--screenshot={shot}", f"--window-size={WIDTH},{HEIGHT}", page.as_uri()],
                   check=True, timeout=180, capture_output=True)
    from PIL import Image
    return Image.open(shot).convert("RGB")


def test_the_plan_report_renders_every_figure(tmp_path):
    page = tmp_path / "plan.html"
    result = kiwi.cli("plan", "--model", "gpt", "--layers", "8", "--cluster", "dgx-a100-80gb:2", "--batch", "64",
                      "--memory", "8GiB", "--report", str(page))
    assert result.returncode == 0, result.stderr
    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") and html.count("<svg") == 4
    assert "src=" not in html and "href=" not in html  # one self-contained file
    image = _screenshot(page, tmp_path / "plan.png")
    assert image.size == (WIDTH, HEIGHT)
    pixels = image.load()
    where = {}  # color -> (count, first row)
    for y in range(HEIGHT):
        for x in range(0, WIDTH, 2):
            p = pixels[x, y]
            if p in where:
                where[p] = (where[p][0] + 1, where[p][1])
            else:
                where[p] = (1, y)
    white = where.get((255, 255, 255), (0, 0))[0]
    assert white < 0.97 * HEIGHT * WIDTH / 2, "the page is blank"
    rows = {}
    for title in ("forward", "backward (+ recompute)", "parameters", "optimizer states", "activations", "layer 0 (stage 0)"):
        count, first = where.get(_rgb(_fill(html, title)), (0, HEIGHT))
        assert count >= 100, f"{title}'s color covers only {count} sampled pixels of the screenshot"
        rows[title] = first
    # down the page: the timeline, then memory per stage, then the layers' strategies
    assert rows["forward"] < rows["parameters"] < rows["layer 0 (stage 0)"]
