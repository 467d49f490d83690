// Drives the example page in headless Chromium for web/browser_test.go:
//   node browser.mjs PAGE_URL FILTER WANT TIMEOUT_MS
// prints READY once the page's subscription is confirmed, then the page's
// deliveries as one JSON array once it shows WANT of them.
import { chromium } from "playwright-core";

const [pageURL, filter, want, timeoutMs] = process.argv.slice(2);
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
  await page.waitForFunction((n) => document.querySelectorAll("#deliveries li").length >= n, Number(want), { timeout });
  // A duplicate would come right after: give it a moment to show.
  await page.waitForTimeout(300);
  const ds = await page.$$eval("#deliveries li", (lis) => lis.map((li) => JSON.parse(li.dataset.delivery)));
  console.log(JSON.stringify(ds));
} finally {
  await browser.close();
}
