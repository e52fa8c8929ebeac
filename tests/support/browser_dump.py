"""A browser for `relayctl web --open` tests: opens the URL it is given in Debian's chromium
(headless, through Playwright), waits until the page shows `argv[2]` (a CSS selector) or 30 s
pass, and prints the page's DOM. It waits for what the page draws, in real time: chromium's
own --virtual-time-budget ran the page's clock ahead of a busy view's first state."""

from __future__ import annotations

import sys

from playwright import sync_api

from .web_view import CHROMIUM, CHROMIUM_ARGS


def main(url: str, selector: str) -> None:
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.goto(url)
            try:
                page.wait_for_selector(selector, timeout=30_000)
            except sync_api.TimeoutError:
                pass  # the DOM as it is tells the test what went wrong
            print(page.content())
        finally:
            browser.close()


if __name__ == "__main__":
    main(sys.argv[2], sys.argv[1])
