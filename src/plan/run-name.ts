/**
 * Readable names for runs that do not name themselves: `adjective-animal-NNNN`, always a valid run
 * name. Takes its randomness as a parameter so a caller (or a test) can make it deterministic.
 */
const adjectives = [
  'amber', 'brave', 'bright', 'calm', 'clever', 'cosmic', 'crisp', 'daring', 'eager', 'fancy', 'gentle', 'glad',
  'golden', 'happy', 'honest', 'jolly', 'keen', 'kind', 'lively', 'lucky', 'mellow', 'merry', 'mighty', 'nimble',
  'noble', 'patient', 'plucky', 'proud', 'quick', 'quiet', 'rapid', 'royal', 'rustic', 'shiny', 'silent', 'sleek',
  'snowy', 'steady', 'sunny', 'swift', 'tidy', 'vivid', 'warm', 'wise', 'witty', 'zesty',
];
const animals = [
  'badger', 'beaver', 'bison', 'crane', 'dolphin', 'eagle', 'falcon', 'ferret', 'finch', 'fox', 'gazelle', 'gecko',
  'heron', 'ibex', 'jaguar', 'koala', 'lemur', 'lynx', 'marmot', 'moose', 'narwhal', 'newt', 'ocelot', 'otter',
  'owl', 'panda', 'pelican', 'puffin', 'quail', 'raven', 'robin', 'salmon', 'seal', 'sparrow', 'stork', 'tapir',
  'tiger', 'toucan', 'turtle', 'walrus', 'weasel', 'whale', 'wombat', 'wren', 'yak', 'zebra',
];

function pick<T>(list: readonly T[], random: () => number): T {
  const item = list[Math.floor(random() * list.length) % list.length];
  if (item === undefined) throw new Error('empty word list');
  return item;
}

export function generateRunName(random: () => number = Math.random): string {
  const number = Math.floor(random() * 10_000) % 10_000;
  return `${pick(adjectives, random)}-${pick(animals, random)}-${String(number).padStart(4, '0')}`;
}

/** dstack's rule for run (and fleet) names. */
export const RUN_NAME = /^[a-z][a-z0-9-]{1,40}$/;
