// Hostile: spins forever without calling the host.
import { handler } from "../../guest-sdk/js/boxcar.js";

export const handle = handler((_job) => {
  for (;;) {}
});
