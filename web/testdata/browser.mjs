// Drives the example page in headless Chromium for web/browser_test.go:
//   node browser.mjs PAGE_URL FILTER FIRST WANT TIMEOUT_MS [drop|crash]
// prints READY once the page's subscription is confirmed; once the page
// shows FIRST deliveries it drops the page's connection and prints DROPPED
// (drop), or prints SHOWN and waits for the test to crash the page's
// broker (crash); once the page has resumed (drop) or recovered on another
// broker (crash) and shows WANT deliveries it prints them as one JSON
// array, then the page's status line.
import { chromium } from "playwright-core";

const [pageURL, filter, first, want, timeoutMs, mode = "drop"] = process.argv.slice(2);
const timeout = Number(timeoutMs);
const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: ["--no-sandbox"] });
try {
  const page = await browser.newPage();
  page.on("console", (m) => console.error("page:", m.text()));
  await page.goto(pageURL);
  const status = (prefix) => page.waitForFunction((p) => document.getElementById("status").textContent.startsWith(p), prefix, { timeout });
  await status("connected");
  await page.fill("#filter", filter);
  await page.click("#subscribe");
  await status("confirmed");
  console.log("READY");
  const shown = (n) => page.waitForFunction((n) => document.querySelectorAll("#deliveries li").length >= n, n, { timeout });
  await shown(Number(first));
  if (mode === "crash") {
    console.log("SHOWN");
    await status("recovered");
  } else {
    await page.evaluate(() => window.deltapubClient.ws.close());
    console.log("DROPPED");
    await status("reconnected");
  }
  await shown(Number(want));
  // A duplicate would come right after: give it a moment to show.
  await page.waitForTimeout(300);
  const ds = await page.$$eval("#deliveries li", (lis) => lis.map((li) => JSON.parse(li.dataset.delivery)));
  console.log(JSON.stringify(ds));
  console.log(await page.$eval("#status", (e) => e.textContent));
} finally {
  await browser.close();
}
