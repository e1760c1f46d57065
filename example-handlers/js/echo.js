// Returns its payload as the result.
import { handler } from "../../guest-sdk/js/boxcar.js";

export const handle = handler((job) => job.payload);
