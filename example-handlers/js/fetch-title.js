// Fetches `{"url": "..."}` with the SDK's HTTP helper (the URL's origin must
// be in `capabilities.http`) and returns `{title, status, url}`. A refused
// origin fails the job terminally; other HTTP failures retry. The handler is
// `async` only to exercise the SDK's Promise path: the HTTP helper itself is
// synchronous.
import { handler, info, Retry, Terminal } from "../../guest-sdk/js/boxcar.js";
import { http, HttpError } from "../../guest-sdk/js/http.js";

export const handle = handler(async (job) => {
  const url = job.payload.url;
  if (typeof url !== "string") {
    throw new Terminal("fetch-title: payload.url must be a string", { code: "invalid-payload" });
  }
  let page;
  try {
    page = http.get(url);
  } catch (e) {
    if (e instanceof HttpError && (e.kind === "denied" || e.kind === "invalid-url")) {
      throw new Terminal(e.message, { code: "http-refused" });
    }
    throw new Retry(e.message);
  }
  info(`${page.url} answered ${page.status}`);
  const found = /<title[^>]*>([\s\S]*?)<\/title/i.exec(page.text());
  const title = found ? found[1].split(/\s+/).filter(Boolean).join(" ") : null;
  return { title, status: page.status, url: page.url };
});
