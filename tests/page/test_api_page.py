"""The API reference page (site/api/, written by pdoc from the docstrings during ./build.sh site):
the page header's "API" link opens it, it shows `Tensor.softmax`'s documentation (a method
Tensor gets from a mixin: web/api-template), its search finds a name, and nothing on it asks a
host other than the page's own origin (local_page fails the test otherwise).
"""
from __future__ import annotations


import pytest

import kernelgen as kg
from browser_util import StaticServer, assembled_site, local_page

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def site():
  """site/ (assembled once per session: browser_util.assembled_site), served on a free port."""
  with StaticServer(assembled_site()) as server:
    yield server


def first_line(doc: str) -> str:
  return " ".join(doc.strip().split("\n\n")[0].split())


def test_header_link_opens_the_api_reference(site, chromium):
  with local_page(chromium, service_workers="block") as page:
    page.goto(site.url("index.html"))
    page.click("header #api-link")
    page.wait_for_url("**/api/kernelgen.html")
    softmax = page.locator('[id="Tensor.softmax"]')
    softmax.wait_for()
    text = " ".join(softmax.inner_text().split())
    assert "softmax" in text
    assert first_line(kg.Tensor.softmax.__doc__).split("`")[0].strip() in text
    # the errors and the modules the header promises are there too
    page.goto(site.url("api/kernelgen/errors.html"))
    assert "ShapeError" in page.locator('[id="ShapeError"]').inner_text()
    page.goto(site.url("api/kernelgen/nn.html"))
    assert page.locator('[id="Linear"]').count() == 1


def test_api_search_finds_a_name_offline(site, chromium):
  """pdoc's search loads its index (api/search.js) from the page's own origin. (Its index holds
  the members a class defines itself: Tensor.reshape, not the mixed-in Tensor.softmax.)"""
  with local_page(chromium, service_workers="block") as page:
    page.goto(site.url("api/kernelgen.html"))
    page.fill("input[type=search]", "reshape")
    hit = page.locator("main.pdoc .search-result a", has_text="kernelgen.Tensor.reshape").first
    hit.wait_for(timeout=30_000)
    hit.click()
    page.wait_for_url("**/api/kernelgen.html#Tensor.reshape")
    assert "element counts differ" in " ".join(
      page.locator('[id="Tensor.reshape"]').inner_text().split())
