// Always refuses: a terminal error with code `content-refused` and JSON
// details (the payload's `reason`, default `policy`).
import { handler, Terminal } from "../../guest-sdk/js/boxcar.js";

export const handle = handler((job) => {
  const reason = job.payload.reason ?? "policy";
  throw new Terminal(`refused: ${reason}`, {
    code: "content-refused",
    details: { reason, job_type: job.jobType, attempt: job.attempt },
  });
});
