"""Texts the verification harness feeds the models (shared with the parity tests).

LONG_TEXT is natural English prose of about 650 tokens in a 49k-vocabulary BPE, enough
for the ladder's ">= 512 tokens" long-input rung; the harness repeats it when a tokenizer
yields fewer tokens than asked for.
"""

# The short prompt of a snapshot with a chat template: one user turn.
CHAT_MESSAGES = [
    {"role": "user", "content": "What is the capital of France? Answer in one sentence."},
]

# The short prompt of a snapshot with a tokenizer but no chat template.
SHORT_TEXT = "Once upon a time, in a small village by the sea, there lived"

LONG_TEXT = """\
The history of the lighthouse is, in many ways, the history of coastal trade itself. Long before
engineers learned to grind lenses or to build towers of interlocking granite, sailors relied on fires
lit on hilltops to mark the mouths of harbours and the edges of dangerous reefs. These early beacons
were unreliable: rain put them out, wind scattered their sparks, and the keepers who tended them were
often paid too little to stay awake through a long winter night. Still, a merchant captain approaching
an unfamiliar shore in the dark would take any light he could get, and the towns that kept their fires
burning found that ships preferred to call at their ports.

The Pharos of Alexandria, completed in the third century before the common era, was the most famous of
the ancient lights. Writers who saw it described a tower of three stages, square at the bottom, octagonal
in the middle and round at the top, rising higher than any building most visitors had ever seen. A fire
burned at its summit, and some accounts claim that a great mirror of polished bronze reflected the
flames far out to sea. Whether or not the mirror existed, the tower stood for more than a thousand
years before earthquakes brought it down, and its name survives in the word for lighthouse in several
languages.

For centuries after the fall of Rome, few new towers were built, and those that were tended to be
modest structures maintained by monasteries or by guilds of pilots. The revival came with the growth of
northern European shipping. Coal fires in iron baskets replaced wood, and later, candles and oil lamps
were placed behind glass to protect them from the weather. Yet an open flame, however bright, spreads
its light in every direction, and most of that light is wasted on the sky and the land behind the tower.

The decisive change came in the early nineteenth century, when a French physicist named Augustin
Fresnel designed a lens made of concentric rings of glass prisms. Each ring bent the light by a
slightly different angle, so that rays which would otherwise have escaped upward or downward were
gathered into a single horizontal beam. A Fresnel lens was lighter and thinner than a solid lens of the
same power, and it could be assembled from many small pieces, which made it practical to manufacture.
Within a few decades, the new lenses had been installed along the coasts of France, Britain and the
United States, and the range at which a light could be seen increased dramatically.

Engineers also learned to give each lighthouse a character of its own. By rotating the lens, or by
placing screens that periodically blocked the flame, they could make a light flash in a particular
rhythm: one long flash every ten seconds, perhaps, or two short flashes followed by a pause. Printed
lists told navigators which pattern belonged to which station, so that a sailor who counted the
flashes could identify the light and, from it, his position. Colour was used in the same way, with red
sectors warning of shoals and white sectors marking safe channels."""
